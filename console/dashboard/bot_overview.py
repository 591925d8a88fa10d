"""The bot page's panel: what only the hub can tell about one bot, in a few queries whatever its history."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot, Turn, VoiceTranscription
from console.dashboard.costs import WINDOWS
from console.dashboard.selectors import BotRow, dashboard_rows
from console.dashboard.setup import event_url
from core.admin import list_url
from feishu.inbound.connection_state import connection_history
from feishu.inbound.refusals import RefusalCount, refusal_counts
from feishu.models import CatchupRun, FeishuConnection, FeishuCredentialCheck, InboundEvent
from probe.models import ProbeJudgement
from probe.selectors import gate_config_get

RECENT = 10
RECENT_CATCHUPS = 5


@dataclass
class BotOverview:
    webhook_url: str
    probe_mode: str
    probe_source: str
    probe_model: str
    probe_cause: str
    turns: list[tuple[Turn, str]]
    judgements: list[tuple[ProbeJudgement, str]]
    turns_url: str
    judgements_url: str
    # A6: the bot's row of the front page (health causes as sentences with their fixes, cost), and its Feishu facts.
    health: BotRow | None
    check: FeishuCredentialCheck | None
    connection: FeishuConnection | None
    last_event: InboundEvent | None
    refusals: list[RefusalCount]  # refused webhook requests per reason (D3)
    connection_history: list[dict]  # the long connection's recent transitions and why, newest first (D1)
    catchups: list[CatchupRun]  # the newest catch-ups (D2): pending, what they read and stored, or why they failed
    # H3: seconds of voice the bot's transcription model was sent, per cost window (24h, 7d, 30d).
    voice_seconds: dict[str, int]


def bot_overview_get(*, bot: Bot, request: HttpRequest) -> BotOverview:
    """The bot page's panel: its absolute webhook URL, its gate's current resolution, its newest turns and
    judgements (RECENT of each, with their admin URLs), its health and cost (the front page's row), how it stands
    with Feishu, and its refused webhook requests per reason (D3). A fixed number of queries, whatever the bot's
    history."""
    config = gate_config_get(bot=bot)
    turn_list = reverse("admin:agents_turn_changelist")
    judgement_list = reverse("admin:probe_probejudgement_changelist")
    turns = list(Turn.objects.filter(bot=bot).order_by("-queued_at", "-pk")[:RECENT])
    judgements = list(ProbeJudgement.objects.filter(bot=bot).order_by("-created_at", "-pk")[:RECENT])
    return BotOverview(
        webhook_url=event_url(bot=bot, request=request),
        probe_mode=config.mode,
        probe_source=config.source,
        probe_model=f"{config.model} ({config.model.provider.name})" if config.model is not None else "",
        probe_cause=config.cause,
        turns=[(turn, f"{turn_list}{turn.pk}/change/") for turn in turns],
        judgements=[(judgement, f"{judgement_list}{judgement.pk}/change/") for judgement in judgements],
        turns_url=list_url("agents.turn", bot__id__exact=bot.pk),
        judgements_url=list_url("probe.probejudgement", bot__id__exact=bot.pk),
        health=next((row for row in dashboard_rows(now=timezone.now()) if row.bot.pk == bot.pk), None),
        check=FeishuCredentialCheck.objects.filter(bot=bot).first(),
        connection=FeishuConnection.objects.filter(bot=bot).first(),
        last_event=InboundEvent.objects.filter(bot=bot).order_by("-received_at", "-pk").first(),
        refusals=refusal_counts(bot),
        connection_history=connection_history(bot)
        if bot.feishu_event_mode == Bot.FeishuEventMode.LONG_CONNECTION
        else [],
        catchups=list(CatchupRun.objects.filter(bot=bot).order_by("-requested_at", "-pk")[:RECENT_CATCHUPS]),
        voice_seconds=_voice_seconds(bot=bot),
    )


def _voice_seconds(*, bot: Bot) -> dict[str, int]:
    """One aggregate: the seconds of voice transcribed for the bot in each of the cost table's windows."""
    now = timezone.now()
    sums = {name: Coalesce(Sum("audio_seconds", filter=Q(created_at__gte=now - span)), 0) for name, span in WINDOWS}
    return VoiceTranscription.objects.filter(bot=bot).aggregate(**sums)
