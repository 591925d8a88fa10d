"""REST chat: post a message to a thread (202, the turn runs in a worker) and read a turn's status."""

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.apis.threads import ERROR_RESPONSE, MessageOutputSerializer
from agents.models import Bot, Thread, Turn
from agents.selectors import thread_get, turn_get
from agents.services.turns import REST_MESSAGE_MAX_CHARS, rest_message_post
from core.exceptions import ConflictError

# The schema says what trim_whitespace + allow_blank=False enforce: at least one character that is not blank.
NOT_BLANK = RegexValidator(r"\S", message="content cannot be blank.")


class MessagePostInputSerializer(serializers.Serializer):
    content = serializers.CharField(
        max_length=REST_MESSAGE_MAX_CHARS, trim_whitespace=True, allow_blank=False, validators=[NOT_BLANK]
    )


class MessagePostOutputSerializer(serializers.Serializer):
    message = MessageOutputSerializer()
    turn_id = serializers.IntegerField()


class TurnOutputSerializer(serializers.ModelSerializer):
    bot: serializers.SlugRelatedField[Bot] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    reply = MessageOutputSerializer(source="reply_message", allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    # Queue mode collect (O2): a skipped turn names the turn whose reply answered its message, and that turn lists
    # the turns it answered besides its own.
    answered_by = serializers.SerializerMethodField()
    answers_also = serializers.SerializerMethodField()

    class Meta:
        model = Turn
        fields = [
            "id",
            "bot",
            "thread",
            "trigger",
            "status",
            "error",
            "attempts",
            "redaction_count",
            "user_message",
            "reply",
            "usage",
            "queued_at",
            "started_at",
            "finished_at",
            "duration_ms",
            "answered_by",
            "answers_also",
        ]
        read_only_fields = fields

    def get_answered_by(self, turn: Turn) -> int | None:
        collected_into = (turn.channel_state or {}).get("collected_into")
        return int(collected_into) if collected_into is not None else None

    def get_answers_also(self, turn: Turn) -> list[int]:
        return [int(turn_id) for turn_id in (turn.channel_state or {}).get("collected", [])]


def thread_post_refusal(*, thread: Thread) -> str | None:
    """Why REST may not post into `thread`, or None: only the REST channel's live threads take REST messages.

    A Feishu thread's people would never see the message or its reply (it would still enter their thread's
    context), an automation thread is driven by its schedule, and a retired thread takes no new turns.
    """
    if thread.retired_at is not None:
        return "This thread is retired; start a new thread to post."
    if thread.channel == Thread.Channel.FEISHU:
        return "This thread belongs to a Feishu chat; post in Feishu instead."
    if thread.channel != Thread.Channel.REST:
        return (
            f"This thread belongs to the {thread.get_channel_display()} channel; only REST threads take REST messages."
        )
    return None


class ThreadMessagePostApi(APIView):
    @extend_schema(
        operation_id="threads_messages_create",
        summary="Post a user message; the bot's turn is queued and its reply appears in /history.",
        request=MessagePostInputSerializer,
        responses={202: MessagePostOutputSerializer, 400: ERROR_RESPONSE, 404: ERROR_RESPONSE, 409: ERROR_RESPONSE},
    )
    def post(self, request: Request, thread_id: int) -> Response:
        thread = thread_get(user=request.user, thread_id=thread_id)
        serializer = MessagePostInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        refusal = thread_post_refusal(thread=thread)
        if refusal is not None:
            raise ConflictError(refusal, extra={"thread_id": thread.pk, "channel": thread.channel})
        message, turn = rest_message_post(
            thread=thread, content=serializer.validated_data["content"], author=request.user.get_username()
        )
        body = {"message": MessageOutputSerializer(message).data, "turn_id": turn.pk}
        return Response(body, status=status.HTTP_202_ACCEPTED)


class TurnDetailApi(APIView):
    @extend_schema(operation_id="turns_retrieve", responses={200: TurnOutputSerializer, 404: ERROR_RESPONSE})
    def get(self, request: Request, turn_id: int) -> Response:
        return Response(TurnOutputSerializer(turn_get(user=request.user, turn_id=turn_id)).data)
