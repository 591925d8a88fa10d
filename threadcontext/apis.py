"""REST API for context decisions (ARCHITECTURE §7, C12): the explain data, for staff and the bot's owner.

Who may read: a superuser, or staff holding the permission to view context decisions (U6, core.permissions). Anyone
else only for a bot profile that `AMUX_CONTEXT_DECISION_ACCESS_CHECK` (a dotted path to `check(user, bot_profile) ->
bool`) says they own; with no check configured only those staff may read. This app cannot import `agents`, so the
ownership rule is plugged in by the project (e.g. a function in agents.selectors).
"""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.exceptions import NotFoundError
from core.permissions import staff_may
from threadcontext.explain import decision_explain_data
from threadcontext.selectors import decision_get, decision_list

DECISION_LIST_LIMIT = 50

CONTEXT_DECISION_ERROR = inline_serializer(
    name="ContextDecisionError",
    fields={"message": serializers.CharField(), "extra": serializers.DictField()},
)


# U6: every bot's decisions are for a superuser or staff holding this permission (core.permissions), not for
# staff as such; an owner reads their own bots' through the configured check.
VIEW_DECISIONS = ("threadcontext.view_threadcontextdecision",)


def decision_access_allowed(*, user, bot_profile: str) -> bool:
    if staff_may(user, VIEW_DECISIONS):
        return True
    check_path = settings.AMUX_CONTEXT_DECISION_ACCESS_CHECK
    if not check_path or not bot_profile:
        return False
    return bool(import_string(check_path)(user, bot_profile))


class ContextDecisionFilterSerializer(serializers.Serializer):
    """The list's query parameters; also their OpenAPI description (lengths and the slug pattern)."""

    root_msg_id = serializers.CharField(
        max_length=64, required=False, allow_blank=True, default="", help_text="The Feishu topic's root message id."
    )
    # A RegexField, not a SlugField, so the schema's pattern admits the empty value the API accepts.
    profile = serializers.RegexField(
        r"^[-a-zA-Z0-9_]*$",
        max_length=64,
        required=False,
        allow_blank=True,
        default="",
        help_text="The bot's slug (required unless staff).",
        error_messages={"invalid": "Enter a bot slug: letters, numbers, underscores or hyphens."},
    )
    chat_id = serializers.CharField(
        max_length=64, required=False, allow_blank=True, default="", help_text="The Feishu chat id."
    )


class ContextDecisionItemSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    item_type = serializers.CharField()
    # DRF's metaclass takes declared fields off the class, so this never shadows Field.source (its str attribute).
    source = serializers.CharField()  # type: ignore[assignment]
    chars = serializers.IntegerField()
    preview = serializers.CharField()
    truncated = serializers.BooleanField(required=False)
    reason = serializers.CharField(required=False, help_text="Excluded items only.")


class ContextDecisionOutputSerializer(serializers.Serializer):
    decision_id = serializers.IntegerField()
    profile = serializers.CharField()
    bridge_id = serializers.CharField()
    chat_id = serializers.CharField()
    root_msg_id = serializers.CharField()
    message_id = serializers.CharField()
    target_id = serializers.CharField()
    mode = serializers.CharField()
    request_text = serializers.CharField()
    context_chars = serializers.IntegerField()
    prompt_chars = serializers.IntegerField()
    selected_item_ids = serializers.ListField(child=serializers.IntegerField())
    selected = ContextDecisionItemSerializer(many=True)
    excluded = ContextDecisionItemSerializer(many=True)
    diagnostics = serializers.DictField()
    thread_context = serializers.CharField()
    prompt_preview = serializers.CharField()
    created_at = serializers.DateTimeField()


class ContextDecisionListApi(APIView):
    @extend_schema(
        operation_id="context_decisions_list",
        parameters=[ContextDecisionFilterSerializer],
        responses={
            200: ContextDecisionOutputSerializer(many=True),
            400: CONTEXT_DECISION_ERROR,
            403: CONTEXT_DECISION_ERROR,
        },
        summary="Context decisions, newest first (at most 50)",
    )
    def get(self, request: Request) -> Response:
        filters = ContextDecisionFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        profile = filters.validated_data["profile"]
        if not decision_access_allowed(user=request.user, bot_profile=profile):
            raise PermissionDenied(
                "Only the owner of the bot given as ?profile=, or staff allowed to view context decisions, may read "
                "its decisions."
            )
        decisions = decision_list(
            root_msg_id=filters.validated_data["root_msg_id"],
            bot_profile=profile,
            chat_id=filters.validated_data["chat_id"],
        )[:DECISION_LIST_LIMIT]
        data = [decision_explain_data(decision=decision) for decision in decisions]
        return Response(ContextDecisionOutputSerializer(data, many=True).data)


class ContextDecisionDetailApi(APIView):
    @extend_schema(
        operation_id="context_decisions_retrieve",
        responses={200: ContextDecisionOutputSerializer, 404: CONTEXT_DECISION_ERROR},
        summary="One context decision with its explain data",
    )
    def get(self, request: Request, decision_id: int) -> Response:
        decision = decision_get(decision_id=decision_id)
        if not decision_access_allowed(user=request.user, bot_profile=decision.bot_profile):
            # The same 404 as a missing id, as for threads: another user cannot tell which decision ids exist.
            raise NotFoundError(f"No context decision with id {decision_id}.", extra={"decision_id": decision_id})
        return Response(ContextDecisionOutputSerializer(decision_explain_data(decision=decision)).data)
