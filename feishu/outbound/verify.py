"""Verify a bot's Feishu credentials against Feishu (A6): fetch a fresh tenant token with its app id and secret,
then the bot's own info, and store what happened with the time. Called on save, by the bot page's "verify"
button and by beat (FEISHU_CREDENTIALS_VERIFY_SECONDS), so a bot with a wrong secret shows unhealthy before its
first reply fails."""

from __future__ import annotations

import logging

from django.utils import timezone
from django.utils.translation import gettext_noop

from agents.models import Bot
from agents.secrets import upstream_error_redacted
from feishu.models import FeishuCredentialCheck
from feishu.outbound import client as feishu_client
from feishu.outbound import reads as feishu_reads
from feishu.outbound.api_errors import FeishuApiError

logger = logging.getLogger(__name__)

DETAIL_MAX_CHARS = 500
MISSING = gettext_noop("The bot has no Feishu app id or app secret.")


def _no_wait(_seconds: float) -> None:
    """A verification answers the operator now: Feishu's rate-limit waits are not waited out here."""


def feishu_credentials_verify(*, bot: Bot) -> FeishuCredentialCheck:
    """Ask Feishu for a tenant token and the bot's info with the bot's credentials; store and return the result."""
    app_name = open_id = ""
    if not bot.has_feishu_credentials:
        ok, detail = False, MISSING
    else:
        feishu_client.tenant_token_forget(bot=bot)  # a cached token would prove nothing about the secret now
        try:
            feishu_client.lark_client_get(bot=bot).tenant_token()
            info = feishu_reads.bot_info(bot=bot, sleep=_no_wait)
        except FeishuApiError as error:
            ok, detail = False, f"bot/v3/info: {error.message} (code {error.code})"
        except Exception as error:  # the SDK's token fetch: ObtainAccessTokenException, a transport error, ...
            ok, detail = False, f"tenant token: {type(error).__name__}: {error}"
        else:
            app_name, open_id = str(info.get("app_name") or ""), str(info.get("open_id") or "")
            ok, detail = True, ""
    check, _ = FeishuCredentialCheck.objects.update_or_create(
        bot=bot,
        defaults={
            "ok": ok,
            "checked_at": timezone.now(),
            # Feishu's refusal may quote what it refused (the app secret): redacted before it is stored and shown.
            "detail": upstream_error_redacted(detail, extra=bot.feishu_secrets, max_chars=DETAIL_MAX_CHARS),
            "app_name": app_name[:200],
            "open_id": open_id[:64],
        },
    )
    logger.info("feishu credentials verified", extra={"bot": bot.slug, "ok": ok})
    return check


def feishu_credentials_verify_all() -> int:
    """Verify every hub bot that has a Feishu app (beat); the number verified."""
    bots = [bot for bot in Bot.objects.filter(is_sandbox=False, is_enabled=True) if bot.has_feishu_credentials]
    for bot in bots:
        feishu_credentials_verify(bot=bot)
    return len(bots)
