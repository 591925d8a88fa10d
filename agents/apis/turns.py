"""REST chat: post a message to a thread (202, the turn runs in a worker) and read a turn's status."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.apis.threads import ERROR_RESPONSE, MessageOutputSerializer
from agents.models import Turn
from agents.selectors import thread_get, turn_get
from agents.services.turns import REST_MESSAGE_MAX_CHARS, rest_message_post


class MessagePostInputSerializer(serializers.Serializer):
    content = serializers.CharField(max_length=REST_MESSAGE_MAX_CHARS, trim_whitespace=True, allow_blank=False)


class MessagePostOutputSerializer(serializers.Serializer):
    message = MessageOutputSerializer()
    turn_id = serializers.IntegerField()


class TurnOutputSerializer(serializers.ModelSerializer):
    bot = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    reply = MessageOutputSerializer(source="reply_message", allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)

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
            "user_message",
            "reply",
            "usage",
            "queued_at",
            "started_at",
            "finished_at",
            "duration_ms",
        ]
        read_only_fields = fields


class ThreadMessagePostApi(APIView):
    @extend_schema(
        operation_id="threads_messages_create",
        summary="Post a user message; the bot's turn is queued and its reply appears in /history.",
        request=MessagePostInputSerializer,
        responses={202: MessagePostOutputSerializer, 400: ERROR_RESPONSE, 404: ERROR_RESPONSE},
    )
    def post(self, request: Request, thread_id: int) -> Response:
        thread = thread_get(user=request.user, thread_id=thread_id)
        serializer = MessagePostInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        message, turn = rest_message_post(
            thread=thread, content=serializer.validated_data["content"], author=request.user.get_username()
        )
        body = {"message": MessageOutputSerializer(message).data, "turn_id": turn.pk}
        return Response(body, status=status.HTTP_202_ACCEPTED)


class TurnDetailApi(APIView):
    @extend_schema(operation_id="turns_retrieve", responses={200: TurnOutputSerializer, 404: ERROR_RESPONSE})
    def get(self, request: Request, turn_id: int) -> Response:
        return Response(TurnOutputSerializer(turn_get(user=request.user, turn_id=turn_id)).data)
