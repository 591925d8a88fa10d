"""REST API for threads, their /history (mask & 1, newest first, keyset cursor) and /context (mask & 2)."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from agents.models import Bot, Message, Thread
from agents.selectors import (
    HISTORY_PAGE_SIZE_DEFAULT,
    HISTORY_PAGE_SIZE_MAX,
    bot_get_for_user,
    context_messages_assembled,
    message_history_page,
    thread_get,
    thread_list,
)
from agents.services.threads import thread_create

ERROR_RESPONSE = inline_serializer(
    name="Error",
    fields={"message": serializers.CharField(), "extra": serializers.DictField()},
)


class ThreadOutputSerializer(serializers.ModelSerializer):
    bot: serializers.SlugRelatedField[Bot] = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Thread
        fields = ["id", "bot", "runtime_mode", "channel", "title", "external_key", "retired_at", "created_at"]
        read_only_fields = fields


class MessageOutputSerializer(serializers.ModelSerializer):
    """A message as a client sees it; the mask is shown read-only and is never a client's input (V4)."""

    class Meta:
        model = Message
        fields = ["id", "kind", "content", "author", "created_at", "visibility_mask"]
        read_only_fields = fields


class ContextMessageOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Message
        fields = ["id", "kind", "content", "prompt", "author", "created_at", "visibility_mask"]
        read_only_fields = fields


class ThreadPagination(LimitOffsetPagination):
    """limit/offset as the schema states them: a garbage or out-of-range value is a 400, never a silent default."""

    default_limit = 50
    max_limit = 200

    def _bounded_int(self, request: Request, name: str, *, default: int, minimum: int, maximum: int | None) -> int:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        message = f"{name} must be a whole number {bounds}."
        try:
            value = int(raw)
        except ValueError:
            raise ValidationError({name: [message]}) from None
        if value < minimum or (maximum is not None and value > maximum):
            raise ValidationError({name: [message]})
        return value

    def get_limit(self, request: Request) -> int:
        return self._bounded_int(request, "limit", default=self.default_limit, minimum=1, maximum=self.max_limit)

    def get_offset(self, request: Request) -> int:
        return self._bounded_int(request, "offset", default=0, minimum=0, maximum=None)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        limit, offset = super().get_schema_operation_parameters(view)
        limit["schema"] = {"type": "integer", "minimum": 1, "maximum": self.max_limit, "default": self.default_limit}
        offset["schema"] = {"type": "integer", "minimum": 0, "default": 0}
        return [limit, offset]


# Serializers are module level with unique names: drf-spectacular names components after the class, and two
# nested "OutputSerializer"s in one schema collide (a warning, which the schema test fails on).
class ThreadCreateInputSerializer(serializers.Serializer):
    bot = serializers.SlugField(
        max_length=64, help_text="The bot's slug; one you own (staff allowed to add threads: any)."
    )
    runtime_mode = serializers.ChoiceField(choices=Thread.RuntimeMode.choices)
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class ThreadHistoryFilterSerializer(serializers.Serializer):
    """The history's query parameters; also their OpenAPI description (bounds and all)."""

    cursor = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="Opaque cursor from a previous page's `next` link.",
    )
    page_size = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=HISTORY_PAGE_SIZE_MAX,
        default=HISTORY_PAGE_SIZE_DEFAULT,
        help_text=f"Default {HISTORY_PAGE_SIZE_DEFAULT}, at most {HISTORY_PAGE_SIZE_MAX}.",
    )


class ThreadHistoryPageSerializer(serializers.Serializer):
    results = MessageOutputSerializer(many=True)
    next = serializers.URLField(allow_null=True, help_text="The next (older) page; null on the last page.")


class ThreadContextOutputSerializer(serializers.Serializer):
    thread = serializers.IntegerField()
    results = ContextMessageOutputSerializer(many=True)


class ThreadListCreateApi(mixins.ListModelMixin, GenericAPIView):
    serializer_class = ThreadOutputSerializer
    pagination_class = ThreadPagination

    def get_queryset(self):
        return thread_list(user=self.request.user)

    @extend_schema(
        operation_id="threads_list",
        summary="Threads you can see (yours; staff allowed to view threads: all), newest first.",
        responses={200: ThreadOutputSerializer(many=True), 400: ERROR_RESPONSE},
    )
    def get(self, request: Request) -> Response:
        return self.list(request)

    @extend_schema(
        operation_id="threads_create",
        summary="Start a thread on one of your bots; channel is rest.",
        request=ThreadCreateInputSerializer,
        responses={201: ThreadOutputSerializer, 400: ERROR_RESPONSE},
    )
    def post(self, request: Request) -> Response:
        serializer = ThreadCreateInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        bot = bot_get_for_user(user=request.user, slug=serializer.validated_data["bot"])
        thread = thread_create(
            bot=bot,
            runtime_mode=serializer.validated_data["runtime_mode"],
            channel=Thread.Channel.REST,
            title=serializer.validated_data["title"],
        )
        return Response(ThreadOutputSerializer(thread).data, status=status.HTTP_201_CREATED)


class ThreadDetailApi(APIView):
    @extend_schema(
        summary="One thread you can see: its bot, channel, mode and title.",
        operation_id="threads_retrieve",
        responses={200: ThreadOutputSerializer, 404: ERROR_RESPONSE},
    )
    def get(self, request: Request, thread_id: int) -> Response:
        thread = thread_get(user=request.user, thread_id=thread_id)
        return Response(ThreadOutputSerializer(thread).data)


class ThreadHistoryApi(APIView):
    @extend_schema(
        operation_id="threads_history",
        summary="Messages shown in the UI history (mask & 1), newest first, cursor paginated.",
        parameters=[ThreadHistoryFilterSerializer],
        responses={200: ThreadHistoryPageSerializer, 400: ERROR_RESPONSE, 404: ERROR_RESPONSE},
    )
    def get(self, request: Request, thread_id: int) -> Response:
        thread = thread_get(user=request.user, thread_id=thread_id)
        filters = ThreadHistoryFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        page = message_history_page(
            thread=thread,
            cursor=filters.validated_data.get("cursor") or None,
            page_size=filters.validated_data["page_size"],
        )
        next_url = None
        if page.next_cursor:
            next_url = replace_query_param(request.build_absolute_uri(), "cursor", page.next_cursor)
        return Response(
            {"results": MessageOutputSerializer(page.messages, many=True).data, "next": next_url},
        )


class ThreadContextApi(APIView):
    @extend_schema(
        operation_id="threads_context",
        summary=(
            "Exactly the messages a turn would now be given as context: mask & 2, the newest that fit the bot's "
            "model window, oldest first."
        ),
        responses={200: ThreadContextOutputSerializer, 404: ERROR_RESPONSE},
    )
    def get(self, request: Request, thread_id: int) -> Response:
        thread = thread_get(user=request.user, thread_id=thread_id)
        messages = context_messages_assembled(thread=thread)
        return Response({"thread": thread.pk, "results": ContextMessageOutputSerializer(messages, many=True).data})
