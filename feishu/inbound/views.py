"""The Feishu webhook: verify with lark-oapi, store the event, answer in milliseconds (ARCHITECTURE §5 step 1)."""

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

# The modules, not their names: they are lazy (lark-oapi, feishu) and the URLconf is loaded by `manage.py check`.
from feishu.channel import approvals as feishu_approvals
from feishu.inbound import webhook as feishu_webhook
from feishu.inbound.refusals import Reason, webhook_refusal_count, webhook_refusal_count_unknown
from feishu.inbound.webhook_bots import webhook_bot_get

logger = logging.getLogger(__name__)

# One answer for every slug without a Feishu webhook; the slug is not echoed.
NO_WEBHOOK = {"message": "There is no Feishu webhook at this address.", "extra": {}}
# A slug comes from the URL, any length: the log keeps this much of it.
LOGGED_SLUG_CHARS = 64


@csrf_exempt
@require_POST
def webhook(request: HttpRequest, bot_slug: str) -> HttpResponse:
    try:
        bot = webhook_bot_get(slug=bot_slug)
    except DatabaseError:
        # The database is away (a restart, a failover): nothing was read or stored, and Feishu retries a non-200.
        logger.warning("feishu webhook: the bot could not be read", extra={"bot": bot_slug[:LOGGED_SLUG_CHARS]})
        return JsonResponse({"message": "Temporarily unavailable.", "extra": {}}, status=503)
    if bot is None or not bot.feishu_verification_token:
        # Unknown, disabled and REST-only bots (without a verification token lark-oapi would accept unauthenticated
        # events) answer alike, so the webhook tells no one which slugs exist (issue 30, 9).
        webhook_refusal_count_unknown(slug=bot_slug)
        return _no_webhook(bot_slug)

    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:  # Django's request.body would raise on it (gunicorn refuses it before us)
        webhook_refusal_count(bot=bot, reason=Reason.MALFORMED)
        return JsonResponse({"message": "Bad Content-Length header.", "extra": {}}, status=400)
    too_big = length > settings.FEISHU_MAX_BODY_BYTES
    body = b""
    if not too_big:
        try:
            body = request.body
        except RequestDataTooBig:  # above DATA_UPLOAD_MAX_MEMORY_SIZE: Django refuses to read it
            too_big = True
    if too_big or len(body) > settings.FEISHU_MAX_BODY_BYTES:
        webhook_refusal_count(bot=bot, reason=Reason.MALFORMED)
        limit = min(
            settings.FEISHU_MAX_BODY_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE or settings.FEISHU_MAX_BODY_BYTES
        )
        return JsonResponse({"message": "Body too large.", "extra": {"limit_bytes": limit}}, status=413)

    outcome = feishu_webhook.webhook_handle(
        bot=bot,
        path=request.path,
        headers=dict(request.headers.items()),
        body=body,
        max_age_seconds=settings.FEISHU_MAX_EVENT_AGE_SECONDS,
    )
    if outcome.refusal:
        webhook_refusal_count(bot=bot, reason=outcome.refusal)
    if outcome.card_action is not None:
        # H1: a verified button press, decided now (Feishu shows our answer's toast and card to the presser).
        try:
            return JsonResponse(feishu_approvals.card_action_answer(bot=bot, event=outcome.card_action))
        except DatabaseError:
            logger.exception("feishu card press could not be decided", extra={"bot": bot.slug})
            return JsonResponse({"message": "Temporarily unavailable.", "extra": {}}, status=503)
    if outcome.event is not None:
        try:
            if feishu_webhook.captured_event_store(bot=bot, event=outcome.event) is None:
                # Authenticated but shapeless: acknowledge so Feishu stops retrying a payload we never accept.
                return JsonResponse({"msg": "ignored"})
        except DatabaseError:
            # Nothing stored: a non-200 makes Feishu retry, which is what we want here.
            logger.exception("feishu event could not be stored", extra={"bot": bot.slug})
            return JsonResponse({"message": "Temporarily unavailable.", "extra": {}}, status=503)
    return JsonResponse(outcome.body, status=outcome.status_code)


def _no_webhook(bot_slug: str) -> HttpResponse:
    """The one 404 of the webhook, logged once with the slug cut (Django's own "Not Found: <path>" line would
    carry a URL of any length)."""
    response = JsonResponse(NO_WEBHOOK, status=404)
    response._has_been_logged = True  # type: ignore[attr-defined]  # django.utils.log.log_response's own marker
    logger.warning("feishu webhook: no Feishu webhook for this slug", extra={"bot": bot_slug[:LOGGED_SLUG_CHARS]})
    return response


@require_GET
def ping(request: HttpRequest) -> HttpResponse:
    """A trivial view: the webhook benchmark's baseline on the same server."""
    return JsonResponse({"msg": "pong"})
