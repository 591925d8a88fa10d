"""Dashboard numbers: a fixed number of aggregate queries per render, whatever the data size.

Every query is bounded to the last 7 days (indexed on its time column) and grouped by bot in the database;
only the aggregates come back. Latency percentiles use PostgreSQL's percentile_disc; on SQLite (tests, the
embedded default) the 24 h durations are fetched and ranked in Python, still one query.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from urllib.parse import urlencode

from django.db import connection
from django.db.models import (
    Aggregate,
    BooleanField,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    Q,
    Sum,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDate
from django.http import HttpRequest
from django.urls import reverse

from agents.models import Bot, Turn
from console.dashboard.health import (
    HEALTH_CAUSES,
    HEALTHY,
    HealthInputs,
    Segment,
    bar_heights,
    health_causes,
    percentile,
    stacked_bars,
)
from feishu.models import OutboundDelivery
from probe.models import ProbeJudgement
from probe.selectors import gate_config_get

DAYS = 7
CHART_HEIGHT_PX = 40
BAR_STEP_PX = 10
FAILED_CLOSED = (ProbeJudgement.Outcome.MISSING, ProbeJudgement.Outcome.MALFORMED, ProbeJudgement.Outcome.ERROR)
# A turn that produced a reply, whether or not Feishu took it yet.
REPLIED = (Turn.Status.REPLIED, Turn.Status.DELIVERED, Turn.Status.DELIVERY_FAILED)
SILENCES = (ProbeJudgement.Outcome.NO_ACTION, *FAILED_CLOSED, ProbeJudgement.Outcome.DISABLED)


class PercentileDisc(Aggregate):
    """PostgreSQL's ordered-set aggregate (nearest rank, like rules.percentile): percentile_disc(fraction) WITHIN GROUP (ORDER BY expression)."""

    function = "percentile_disc"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, *, fraction: float, **extra) -> None:
        super().__init__(expression, fraction=float(fraction), **extra)


@dataclass
class Link:
    value: int | str
    url: str


@dataclass
class DayBar:
    x: int
    day: date
    value: int
    y: int
    height: int
    title: str


@dataclass
class BotRow:
    bot: Bot
    bot_url: str
    state: str
    state_label: str
    causes: list[tuple[str, str, str]]  # (cause, label, url)
    numbers: dict[str, Link]
    silences: list[tuple[str, Link]]
    latency_p50_ms: int | None
    latency_p95_ms: int | None
    token_bars: list[DayBar] = field(default_factory=list)
    # Per day (oldest first): its x, the day and its outcome segments, stacked.
    gate_bars: list[tuple[int, date, list[Segment]]] = field(default_factory=list)


def _url(base: str, **params: object) -> str:
    return f"{base}?{urlencode(params)}"


def _int_key(key: str) -> Coalesce:
    """The sum of an integer key of Turn.usage (0 where absent)."""
    return Coalesce(Sum(Cast(KeyTextTransform(key, "usage"), IntegerField())), 0)


def _within(window: Q) -> ExpressionWrapper:
    """Whether the row falls in `window`, as a column to group by."""
    return ExpressionWrapper(window, output_field=BooleanField())


def _latencies(*, since: datetime) -> dict[int, tuple[int | None, int | None]]:
    """(p50, p95) turn latency in ms per bot id, started_at to finished_at, over turns finished since `since`."""
    finished = Turn.objects.filter(queued_at__gte=since, started_at__isnull=False, finished_at__isnull=False)
    if connection.vendor == "postgresql":
        duration = F("finished_at") - F("started_at")
        rows = finished.values("bot_id").annotate(
            p50=PercentileDisc(duration, fraction=0.5, output_field=DurationField()),
            p95=PercentileDisc(duration, fraction=0.95, output_field=DurationField()),
        )
        return {
            row["bot_id"]: (int(row["p50"].total_seconds() * 1000), int(row["p95"].total_seconds() * 1000))
            for row in rows
        }
    durations: dict[int, list[int]] = defaultdict(list)
    for bot_id, started_at, finished_at in finished.values_list("bot_id", "started_at", "finished_at"):
        durations[bot_id].append(int((finished_at - started_at).total_seconds() * 1000))
    return {bot_id: (percentile(values, 0.5), percentile(values, 0.95)) for bot_id, values in durations.items()}


def _bars(per_day: dict[date, int], days: list[date], *, title: str) -> list[DayBar]:
    values = [per_day.get(day, 0) for day in days]
    heights = bar_heights(values, height=CHART_HEIGHT_PX)
    return [
        DayBar(
            x=index * BAR_STEP_PX,
            day=day,
            value=value,
            y=CHART_HEIGHT_PX - height,
            height=height,
            title=f"{day.isoformat()}: {value} {title}",
        )
        for index, (day, value, height) in enumerate(zip(days, values, heights, strict=True))
    ]


def _gate_bars(per_outcome: dict[str, dict[date, int]], days: list[date]) -> list[tuple[int, date, list[Segment]]]:
    series = {
        outcome: [per_outcome.get(outcome, {}).get(day, 0) for day in days] for outcome in ProbeJudgement.Outcome.values
    }
    columns = stacked_bars(series, height=CHART_HEIGHT_PX)
    return [(index * BAR_STEP_PX, day, column) for index, (day, column) in enumerate(zip(days, columns, strict=True))]


def dashboard_rows(*, now: datetime) -> list[BotRow]:
    """One row per bot, in name order: health and its causes, 24 h and 7 day numbers, each with its admin link."""
    since_day = now - timedelta(hours=24)
    since_week = now - timedelta(days=DAYS)
    day_iso = since_day.replace(microsecond=0).isoformat()
    week_iso = since_week.replace(microsecond=0).isoformat()

    # The playground's stand-ins are not the hub's bots: their turns and judgements stay out of the front page.
    bots = list(Bot.objects.filter(is_sandbox=False).select_related("primary_model__provider").order_by("name", "pk"))

    # One scan of each table's 7 day window, grouped by (bot, day, within 24 h, status or outcome): every number
    # is a sum of those groups here (at most 8 days x 2 x a few statuses per bot), so each row is counted once and
    # its JSON usage keys are cast once each, not once per aggregate that needs them.
    turns: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    tokens_per_day: dict[int, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    for row in (
        Turn.objects.filter(queued_at__gte=since_week)
        .annotate(day=TruncDate("queued_at"), recent=_within(Q(queued_at__gte=since_day)))
        .values("bot_id", "day", "recent", "status")
        .annotate(n=Count("*"), primary_in=_int_key("input_tokens"), primary_out=_int_key("output_tokens"))
    ):
        totals, n, status = turns[row["bot_id"]], row["n"], row["status"]
        totals["primary_in_7d"] += row["primary_in"]
        totals["primary_out_7d"] += row["primary_out"]
        if row["recent"]:
            totals["turns_24h"] += n
            totals["replies_24h"] += n if status in REPLIED else 0
            totals["failed_24h"] += n if status == Turn.Status.FAILED else 0
            totals["delivery_failed_24h"] += n if status == Turn.Status.DELIVERY_FAILED else 0
            totals["primary_in_24h"] += row["primary_in"]
            totals["primary_out_24h"] += row["primary_out"]
        tokens_per_day[row["bot_id"]][row["day"]] += row["primary_in"] + row["primary_out"]

    # Served by an index-only scan on PostgreSQL (judgement_window_covering holds every column read here).
    judgements: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    outcomes_per_day: dict[int, dict[str, dict[date, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    for row in (
        ProbeJudgement.objects.filter(created_at__gte=since_week)
        .annotate(day=TruncDate("created_at"), recent=_within(Q(created_at__gte=since_day)))
        .values("bot_id", "day", "recent", "outcome")
        .annotate(n=Count("*"), probe_in=Coalesce(Sum("input_tokens"), 0), probe_out=Coalesce(Sum("output_tokens"), 0))
    ):
        bot_id, outcome, n = row["bot_id"], row["outcome"], row["n"]
        totals = judgements[bot_id]
        totals["probe_in_7d"] += row["probe_in"]
        totals["probe_out_7d"] += row["probe_out"]
        if row["recent"]:
            totals["probe_in_24h"] += row["probe_in"]
            totals["probe_out_24h"] += row["probe_out"]
            totals[f"silence_{outcome}"] += n
            totals["failed_closed_24h"] += n if outcome in FAILED_CLOSED else 0
        outcomes_per_day[bot_id][outcome][row["day"]] += n
        tokens_per_day[bot_id][row["day"]] += row["probe_in"] + row["probe_out"]

    failed_deliveries = dict(
        OutboundDelivery.objects.filter(created_at__gte=since_day, status=OutboundDelivery.Status.FAILED)
        .values("bot_id")
        .annotate(n=Count("pk"))
        .values_list("bot_id", "n")
    )
    latencies = _latencies(since=since_day)

    # Each list's URL reversed once per render, not per number: a reverse() costs more than the row's queries.
    turn_list = reverse("admin:agents_turn_changelist")
    judgement_list = reverse("admin:probe_probejudgement_changelist")
    delivery_list = reverse("admin:feishu_outbounddelivery_changelist")
    bot_list = reverse("admin:agents_bot_changelist")
    provider_list = reverse("admin:agents_provider_changelist")
    today = now.date()
    days = [today - timedelta(days=offset) for offset in range(DAYS - 1, -1, -1)]
    rows = []
    for bot in bots:
        t = turns.get(bot.pk, {})
        j = judgements.get(bot.pk, {})
        provider = bot.primary_model.provider
        causes = health_causes(
            HealthInputs(
                provider_test_failed=provider.last_test_ok is False,
                failed_closed_24h=j.get("failed_closed_24h", 0),
                failed_turns_24h=t.get("failed_24h", 0),
                failed_deliveries_24h=failed_deliveries.get(bot.pk, 0) + t.get("delivery_failed_24h", 0),
                has_feishu_credentials=bot.has_feishu_credentials,
            )
        )
        turns_day = {"bot__id__exact": bot.pk, "queued_at__gte": day_iso}
        turns_week = {"bot__id__exact": bot.pk, "queued_at__gte": week_iso}
        judgements_day = {"bot__id__exact": bot.pk, "created_at__gte": day_iso}
        judgements_week = {"bot__id__exact": bot.pk, "created_at__gte": week_iso}
        failed_closed_url = _url(judgement_list, **judgements_day, outcome__in=",".join(FAILED_CLOSED))
        cause_urls = {
            # The admin's change page is its list's URL + "<pk>/change/".
            "provider_test_failed": f"{provider_list}{provider.pk}/change/",
            "failing_closed": failed_closed_url,
            "turns_failing": _url(turn_list, **turns_day, status__exact=Turn.Status.FAILED),
            # The turns whose delivery failed when there are some, else the failed delivery rows themselves.
            "deliveries_failing": _url(turn_list, **turns_day, status__exact=Turn.Status.DELIVERY_FAILED)
            if t.get("delivery_failed_24h", 0)
            else _url(delivery_list, bot__id__exact=bot.pk, status__exact=OutboundDelivery.Status.FAILED),
            "feishu_not_connected": f"{bot_list}{bot.pk}/change/",
        }
        p50, p95 = latencies.get(bot.pk, (None, None))
        rows.append(
            BotRow(
                bot=bot,
                bot_url=f"{bot_list}{bot.pk}/change/",
                state=causes[0] if causes else HEALTHY,
                state_label=str(HEALTH_CAUSES[causes[0]]) if causes else HEALTHY,
                causes=[(cause, str(HEALTH_CAUSES[cause]), cause_urls[cause]) for cause in causes],
                numbers={
                    "turns_24h": Link(t.get("turns_24h", 0), _url(turn_list, **turns_day)),
                    "replies_24h": Link(
                        t.get("replies_24h", 0), _url(turn_list, **turns_day, status__in=",".join(REPLIED))
                    ),
                    "failed_closed_24h": Link(j.get("failed_closed_24h", 0), failed_closed_url),
                    "primary_in_24h": Link(t.get("primary_in_24h", 0), _url(turn_list, **turns_day)),
                    "primary_out_24h": Link(t.get("primary_out_24h", 0), _url(turn_list, **turns_day)),
                    "primary_in_7d": Link(t.get("primary_in_7d", 0), _url(turn_list, **turns_week)),
                    "primary_out_7d": Link(t.get("primary_out_7d", 0), _url(turn_list, **turns_week)),
                    "probe_in_24h": Link(j.get("probe_in_24h", 0), _url(judgement_list, **judgements_day)),
                    "probe_out_24h": Link(j.get("probe_out_24h", 0), _url(judgement_list, **judgements_day)),
                    "probe_in_7d": Link(j.get("probe_in_7d", 0), _url(judgement_list, **judgements_week)),
                    "probe_out_7d": Link(j.get("probe_out_7d", 0), _url(judgement_list, **judgements_week)),
                },
                silences=[
                    (
                        outcome,
                        Link(
                            j.get(f"silence_{outcome}", 0),
                            _url(judgement_list, **judgements_day, outcome__exact=outcome),
                        ),
                    )
                    for outcome in SILENCES
                ],
                latency_p50_ms=p50,
                latency_p95_ms=p95,
                token_bars=_bars(tokens_per_day.get(bot.pk, {}), days, title="tokens"),
                gate_bars=_gate_bars(outcomes_per_day.get(bot.pk, {}), days),
            )
        )
    return rows


RECENT = 10


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


def bot_overview_get(*, bot: Bot, request: HttpRequest) -> BotOverview:
    """The bot page's panel: its absolute webhook URL, its gate's current resolution, its newest turns and
    judgements (RECENT of each, with their admin URLs). Three queries at most, whatever the bot's history."""
    config = gate_config_get(bot=bot)
    turn_list = reverse("admin:agents_turn_changelist")
    judgement_list = reverse("admin:probe_probejudgement_changelist")
    turns = list(Turn.objects.filter(bot=bot).order_by("-queued_at", "-pk")[:RECENT])
    judgements = list(ProbeJudgement.objects.filter(bot=bot).order_by("-created_at", "-pk")[:RECENT])
    return BotOverview(
        webhook_url=request.build_absolute_uri(reverse("feishu:webhook", args=[bot.slug])),
        probe_mode=config.mode,
        probe_source=config.source,
        probe_model=f"{config.model} ({config.model.provider.name})" if config.model is not None else "",
        probe_cause=config.cause,
        turns=[(turn, f"{turn_list}{turn.pk}/change/") for turn in turns],
        judgements=[(judgement, f"{judgement_list}{judgement.pk}/change/") for judgement in judgements],
        turns_url=_url(turn_list, bot__id__exact=bot.pk),
        judgements_url=_url(judgement_list, bot__id__exact=bot.pk),
    )
