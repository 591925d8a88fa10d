"""The playground page, its state (polled as JSON) and its post endpoint; thin: parse, call, format."""

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _

from console.models import PlaygroundGroup
from console.playground.selectors import playground_state_get
from console.playground.services import PlaygroundInputError, playground_message_post

POLL_INTERVAL_MS = 1000
MAX_POST_BYTES = 32 * 1024


def page_labels() -> dict[str, str]:
    """The words the page's script writes, in the operator's language."""
    return {
        "gate": _("Probe"),
        "addressed": _("Addressed: no probe"),
        "turn": _("Turn:"),
        "context": _("Context decision"),
        "waiting": _("waiting for the worker"),
        "no_turn": _("no turn (not addressed)"),
        "sending": _("Sending…"),
        "sent": _("Sent."),
        "offline": _("The hub did not answer; retrying."),
        "handoff": _("Hand-off"),
        "arbitration": _("Arbitration"),
        "picked": _("picked"),
    }


def room(request: HttpRequest, *, group_id: int, context: dict) -> HttpResponse:
    group = get_object_or_404(PlaygroundGroup, pk=group_id)
    return TemplateResponse(
        request,
        "admin/playground/room.html",
        {
            **context,
            "group": group,
            "title": group.name,
            "poll_interval_ms": POLL_INTERVAL_MS,
            "labels": page_labels(),
        },
    )


def state(request: HttpRequest, *, group_id: int) -> JsonResponse:
    group = get_object_or_404(PlaygroundGroup, pk=group_id)
    return JsonResponse(playground_state_get(group=group))


def post(request: HttpRequest, *, group_id: int) -> JsonResponse:
    group = get_object_or_404(PlaygroundGroup, pk=group_id)
    if len(request.body) > MAX_POST_BYTES:
        return JsonResponse({"message": _("The message is too long.")}, status=413)
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return JsonResponse({"message": _("The request is not JSON.")}, status=400)
    if not isinstance(data, dict):
        return JsonResponse({"message": _("The request is not a JSON object.")}, status=400)
    mentions = data.get("mentions") or []
    if not isinstance(mentions, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) for item in mentions
    ):
        return JsonResponse({"message": _("mentions must be a list of bot ids.")}, status=400)
    sender, text, root = data.get("sender"), data.get("text"), data.get("root_message_id") or ""
    if not isinstance(sender, str) or not isinstance(text, str) or not isinstance(root, str):
        return JsonResponse({"message": _("sender, text and root_message_id must be strings.")}, status=400)
    try:
        message = playground_message_post(
            group=group, sender_name=sender, text=text, mention_bot_ids=mentions, root_message_id=root
        )
    except PlaygroundInputError as error:
        return JsonResponse({"message": str(error)}, status=400)
    return JsonResponse({"message_id": message.message_id}, status=201)
