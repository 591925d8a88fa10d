"""Refused webhook requests counted per bot and reason (D3), so a misconfigured app shows on its page, not in logs.

The webhook calls `webhook_refusal_count` once per refused request; the bot page and the console's health read
`refusal_counts`. A count is one UPDATE ... SET count = count + 1 (a row per bot and reason, created on the first
refusal), never a read-modify-write: concurrent workers never lose one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext

from agents.models import Bot
from feishu.models import WebhookRefusal

logger = logging.getLogger(__name__)

Reason = WebhookRefusal.Reason


@dataclass(frozen=True)
class RefusalCount:
    reason: str
    label: str
    count: int
    first_at: datetime
    last_at: datetime


def webhook_refusal_count(*, bot: Bot | None, reason: str) -> None:
    """Add one refused request of `bot` (None: a slug that names no bot) for `reason`; never raises.

    The refusal is answered whatever happens here: a database that cannot count it only costs the count (logged).
    """
    rows = WebhookRefusal.objects.filter(reason=reason)
    rows = rows.filter(bot=bot) if bot is not None else rows.filter(bot__isnull=True)
    now = timezone.now()
    try:
        if rows.update(count=F("count") + 1, last_at=now):
            return
        try:
            with transaction.atomic():  # a savepoint: the racing creator's IntegrityError leaves no broken transaction
                WebhookRefusal.objects.create(bot=bot, reason=reason, count=1, last_at=now)
        except IntegrityError:  # another worker created the row between our update and insert
            rows.update(count=F("count") + 1, last_at=now)
    except DatabaseError:
        logger.warning("feishu webhook refusal could not be counted", extra={"reason": reason})


def webhook_refusal_count_unknown(*, slug: str) -> None:
    """Count a request to a slug with no webhook: on its bot when one has the slug (disabled, or without a
    verification token), else on the one row of slugs that name no bot (the slug itself is not kept)."""
    try:
        bot = Bot.objects.filter(slug=slug).only("pk").first()
    except DatabaseError:
        logger.warning("feishu webhook refusal could not be counted", extra={"reason": Reason.UNKNOWN_BOT})
        return
    webhook_refusal_count(bot=bot, reason=Reason.UNKNOWN_BOT)


def refusal_counts(bot: Bot | None) -> list[RefusalCount]:
    """The bot's refused webhook requests per reason (None: those for slugs that name no bot), newest first."""
    rows = WebhookRefusal.objects.filter(bot=bot) if bot is not None else WebhookRefusal.objects.filter(bot=None)
    return [
        RefusalCount(
            reason=row.reason,
            label=gettext(Reason(row.reason).label),
            count=row.count,
            first_at=row.first_at,
            last_at=row.last_at,
        )
        for row in rows.order_by("-last_at", "reason")
    ]
