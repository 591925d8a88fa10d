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

from django.db.models import (
    BooleanField,
    Count,
    ExpressionWrapper,
    IntegerField,
    Max,
    Q,
    Sum,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDate
from django.urls import reverse

from agents.models import Bot, Turn
from console.dashboard.costs import BotCost, bot_costs
from console.dashboard.feishu_state import connection_down, credentials_state
from console.dashboard.health import (
    HEALTH_CAUSES,
    HEALTH_SENTENCES,
    HEALTHY,
    WARNINGS,
    HealthInputs,
    Segment,
    bar_heights,
    health_causes,
    stacked_bars,
)
from console.dashboard.latency import turn_latencies
from feishu.models import FeishuConnection, FeishuCredentialCheck, InboundEvent, OutboundDelivery, WebhookRefusal
from probe.models import ProbeJudgement

DAYS = 7
CHART_HEIGHT_PX = 40
BAR_STEP_PX = 10
FAILED_CLOSED = (ProbeJudgement.Outcome.MISSING, ProbeJudgement.Outcome.MALFORMED, ProbeJudgement.Outcome.ERROR)
# A turn that produced a reply, whether or not Feishu took it yet.
REPLIED = (Turn.Status.REPLIED, Turn.Status.DELIVERED, Turn.Status.DELIVERY_FAILED)
SILENCES = (ProbeJudgement.Outcome.NO_ACTION, *FAILED_CLOSED, ProbeJudgement.Outcome.DISABLED)


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
    state_is_warning: bool
    causes: list[tuple[str, str, str]]  # (cause, sentence, url)
    numbers: dict[str, Link]
    silences: list[tuple[str, Link]]
    latency_p50_ms: int | None
    latency_p95_ms: int | None
    token_bars: list[DayBar] = field(default_factory=list)
    # Per day (oldest first): its x, the day and its outcome segments, stacked.
    gate_bars: list[tuple[int, date, list[Segment]]] = field(default_factory=list)
    cost: BotCost = field(default_factory=BotCost)  # A7, console.dashboard.costs

    @property
    def silenced(self) -> bool:
        return any(link.value for _outcome, link in self.silences)


def _url(base: str, **params: object) -> str:
    return f"{base}?{urlencode(params)}"


def _int_key(key: str) -> Coalesce:
    """The sum of an integer key of Turn.usage (0 where absent)."""
    return Coalesce(Sum(Cast(KeyTextTransform(key, "usage"), IntegerField())), 0)


def _within(window: Q) -> ExpressionWrapper:
    """Whether the row falls in `window`, as a column to group by."""
    return ExpressionWrapper(window, output_field=BooleanField())


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


@dataclass(frozen=True)
class _Window:
    """The last 24 hours and the last DAYS days: as datetimes for the queries, as ISO strings to the second for
    the admin's list filters, and the chart's days, oldest first."""

    since_day: datetime
    since_week: datetime
    days: list[date]

    @classmethod
    def ending(cls, now: datetime) -> _Window:
        today = now.date()
        return cls(
            since_day=now - timedelta(hours=24),
            since_week=now - timedelta(days=DAYS),
            days=[today - timedelta(days=offset) for offset in range(DAYS - 1, -1, -1)],
        )

    @property
    def day_iso(self) -> str:
        return self.since_day.replace(microsecond=0).isoformat()

    @property
    def week_iso(self) -> str:
        return self.since_week.replace(microsecond=0).isoformat()


@dataclass
class _Totals:
    """Every number of the front page, per bot id, summed from a fixed number of grouped queries."""

    turns: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    judgements: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    # Primary and probe tokens together, per day.
    tokens_per_day: dict[int, dict[date, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    outcomes_per_day: dict[int, dict[str, dict[date, int]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    )
    failed_deliveries: dict[int, int] = field(default_factory=dict)
    latencies: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    last_event_at: dict[int, datetime] = field(default_factory=dict)  # within the last DAYS days
    credential_checks: dict[int, FeishuCredentialCheck] = field(default_factory=dict)
    connections: dict[int, FeishuConnection] = field(default_factory=dict)
    refused_24h: set[int] = field(default_factory=set)  # bots with a webhook request refused in the last 24 h (D3)


# The scans below read each table's 7 day window once, grouped by (bot, day, within 24 h, status or outcome):
# every number is a sum of those groups (at most 8 days x 2 x a few statuses per bot), so each row is counted once
# and its JSON usage keys are cast once each, not once per aggregate that needs them.


def _turns_add(*, totals: _Totals, window: _Window) -> None:
    """Add the turns' counts and primary tokens (24 h and 7 days) and their tokens per day to `totals`."""
    for row in (
        Turn.objects.filter(queued_at__gte=window.since_week)
        .annotate(day=TruncDate("queued_at"), recent=_within(Q(queued_at__gte=window.since_day)))
        .values("bot_id", "day", "recent", "status")
        .annotate(n=Count("*"), primary_in=_int_key("input_tokens"), primary_out=_int_key("output_tokens"))
    ):
        bot_totals, n, status = totals.turns[row["bot_id"]], row["n"], row["status"]
        bot_totals["primary_in_7d"] += row["primary_in"]
        bot_totals["primary_out_7d"] += row["primary_out"]
        if row["recent"]:
            bot_totals["turns_24h"] += n
            bot_totals["replies_24h"] += n if status in REPLIED else 0
            bot_totals["failed_24h"] += n if status == Turn.Status.FAILED else 0
            bot_totals["delivery_failed_24h"] += n if status == Turn.Status.DELIVERY_FAILED else 0
            bot_totals["primary_in_24h"] += row["primary_in"]
            bot_totals["primary_out_24h"] += row["primary_out"]
        totals.tokens_per_day[row["bot_id"]][row["day"]] += row["primary_in"] + row["primary_out"]


def _judgements_add(*, totals: _Totals, window: _Window) -> None:
    """Add the gate's outcomes (24 h counts, per day) and probe tokens (24 h, 7 days, per day) to `totals`."""
    # Served by an index-only scan on PostgreSQL (judgement_window_covering holds every column read here).
    for row in (
        ProbeJudgement.objects.filter(created_at__gte=window.since_week)
        .annotate(day=TruncDate("created_at"), recent=_within(Q(created_at__gte=window.since_day)))
        .values("bot_id", "day", "recent", "outcome")
        .annotate(n=Count("*"), probe_in=Coalesce(Sum("input_tokens"), 0), probe_out=Coalesce(Sum("output_tokens"), 0))
    ):
        bot_id, outcome, n = row["bot_id"], row["outcome"], row["n"]
        bot_totals = totals.judgements[bot_id]
        bot_totals["probe_in_7d"] += row["probe_in"]
        bot_totals["probe_out_7d"] += row["probe_out"]
        if row["recent"]:
            bot_totals["probe_in_24h"] += row["probe_in"]
            bot_totals["probe_out_24h"] += row["probe_out"]
            bot_totals[f"silence_{outcome}"] += n
            bot_totals["failed_closed_24h"] += n if outcome in FAILED_CLOSED else 0
        totals.outcomes_per_day[bot_id][outcome][row["day"]] += n
        totals.tokens_per_day[bot_id][row["day"]] += row["probe_in"] + row["probe_out"]


def _totals_get(*, window: _Window) -> _Totals:
    """The front page's numbers for every bot: eight queries, whatever the data size (one row per bot at most in
    the credential checks and connections)."""
    totals = _Totals()
    _turns_add(totals=totals, window=window)
    _judgements_add(totals=totals, window=window)
    totals.failed_deliveries = dict(
        OutboundDelivery.objects.filter(created_at__gte=window.since_day, status=OutboundDelivery.Status.FAILED)
        .values("bot_id")
        .annotate(n=Count("pk"))
        .values_list("bot_id", "n")
    )
    totals.latencies = turn_latencies(since=window.since_day)
    totals.last_event_at = dict(
        InboundEvent.objects.filter(received_at__gte=window.since_week)
        .values("bot_id")
        .annotate(last=Max("received_at"))
        .values_list("bot_id", "last")
    )
    totals.credential_checks = {check.bot_id: check for check in FeishuCredentialCheck.objects.all()}
    totals.connections = {connection.bot_id: connection for connection in FeishuConnection.objects.all()}
    # One row per bot and reason at most (feishu.WebhookRefusal is bounded).
    totals.refused_24h = set(
        WebhookRefusal.objects.filter(last_at__gte=window.since_day, bot__isnull=False).values_list("bot_id", flat=True)
    )
    return totals


@dataclass(frozen=True)
class _AdminLinks:
    """The admin list URLs a row links to, and one bot's filters on them for each window."""

    turns: str
    judgements: str
    deliveries: str
    bots: str
    providers: str

    @classmethod
    def lists_reversed(cls) -> _AdminLinks:
        # Each list's URL reversed once per render, not per number: a reverse() costs more than the row's queries.
        return cls(
            turns=reverse("admin:agents_turn_changelist"),
            judgements=reverse("admin:probe_probejudgement_changelist"),
            deliveries=reverse("admin:feishu_outbounddelivery_changelist"),
            bots=reverse("admin:agents_bot_changelist"),
            providers=reverse("admin:agents_provider_changelist"),
        )

    def change(self, list_url: str, pk: int) -> str:
        # The admin's change page is its list's URL + "<pk>/change/".
        return f"{list_url}{pk}/change/"

    def turns_of(self, bot: Bot, window: _Window, *, week: bool = False, **filters: object) -> str:
        since = window.week_iso if week else window.day_iso
        return _url(self.turns, bot__id__exact=bot.pk, queued_at__gte=since, **filters)

    def judgements_of(self, bot: Bot, window: _Window, *, week: bool = False, **filters: object) -> str:
        since = window.week_iso if week else window.day_iso
        return _url(self.judgements, bot__id__exact=bot.pk, created_at__gte=since, **filters)


def _cause_urls(*, bot: Bot, window: _Window, links: _AdminLinks, delivery_failed_24h: int) -> dict[str, str]:
    """Where each health cause of `bot` is fixed or explained."""
    setup = f"{links.change(links.bots, bot.pk)}".removesuffix("change/") + "setup/"
    return {
        "credentials_refused": setup,
        "connection_down": setup,
        "feishu_not_set_up": setup,
        "webhook_refused": links.change(links.bots, bot.pk) + "#bot-webhook-refusals",
        "provider_test_failed": links.change(links.providers, bot.primary_model.provider.pk),
        "failing_closed": links.judgements_of(bot, window, outcome__in=",".join(FAILED_CLOSED)),
        "turns_failing": links.turns_of(bot, window, status__exact=Turn.Status.FAILED),
        # The turns whose delivery failed when there are some, else the failed delivery rows themselves.
        "deliveries_failing": links.turns_of(bot, window, status__exact=Turn.Status.DELIVERY_FAILED)
        if delivery_failed_24h
        else _url(links.deliveries, bot__id__exact=bot.pk, status__exact=OutboundDelivery.Status.FAILED),
    }


def _numbers(*, bot: Bot, window: _Window, links: _AdminLinks, totals: _Totals) -> dict[str, Link]:
    """The row's counts and token sums, each linked to the admin list it counts."""
    turns, judgements = totals.turns.get(bot.pk, {}), totals.judgements.get(bot.pk, {})
    turns_day, turns_week = links.turns_of(bot, window), links.turns_of(bot, window, week=True)
    judgements_day, judgements_week = links.judgements_of(bot, window), links.judgements_of(bot, window, week=True)
    return {
        "turns_24h": Link(turns.get("turns_24h", 0), turns_day),
        "replies_24h": Link(turns.get("replies_24h", 0), links.turns_of(bot, window, status__in=",".join(REPLIED))),
        "failed_closed_24h": Link(
            judgements.get("failed_closed_24h", 0),
            links.judgements_of(bot, window, outcome__in=",".join(FAILED_CLOSED)),
        ),
        "primary_in_24h": Link(turns.get("primary_in_24h", 0), turns_day),
        "primary_out_24h": Link(turns.get("primary_out_24h", 0), turns_day),
        "primary_in_7d": Link(turns.get("primary_in_7d", 0), turns_week),
        "primary_out_7d": Link(turns.get("primary_out_7d", 0), turns_week),
        "probe_in_24h": Link(judgements.get("probe_in_24h", 0), judgements_day),
        "probe_out_24h": Link(judgements.get("probe_out_24h", 0), judgements_day),
        "probe_in_7d": Link(judgements.get("probe_in_7d", 0), judgements_week),
        "probe_out_7d": Link(judgements.get("probe_out_7d", 0), judgements_week),
    }


def _bot_row(*, bot: Bot, window: _Window, links: _AdminLinks, totals: _Totals) -> BotRow:
    turns, judgements = totals.turns.get(bot.pk, {}), totals.judgements.get(bot.pk, {})
    causes = health_causes(
        HealthInputs(
            provider_test_failed=bot.primary_model.provider.last_test_ok is False,
            failed_closed_24h=judgements.get("failed_closed_24h", 0),
            failed_turns_24h=turns.get("failed_24h", 0),
            failed_deliveries_24h=totals.failed_deliveries.get(bot.pk, 0) + turns.get("delivery_failed_24h", 0),
            credentials=credentials_state(bot, totals.credential_checks.get(bot.pk)),
            connection_down=connection_down(bot, totals.connections.get(bot.pk)),
            events_recent=bot.pk in totals.last_event_at,
            webhook_refused_24h=bot.pk in totals.refused_24h,
        )
    )
    cause_urls = _cause_urls(
        bot=bot, window=window, links=links, delivery_failed_24h=turns.get("delivery_failed_24h", 0)
    )
    p50, p95 = totals.latencies.get(bot.pk, (None, None))
    return BotRow(
        bot=bot,
        bot_url=links.change(links.bots, bot.pk),
        state=causes[0] if causes else HEALTHY,
        state_label=str(HEALTH_CAUSES[causes[0]]) if causes else HEALTHY,
        state_is_warning=bool(causes) and causes[0] in WARNINGS,
        causes=[(cause, str(HEALTH_SENTENCES[cause]), cause_urls[cause]) for cause in causes],
        numbers=_numbers(bot=bot, window=window, links=links, totals=totals),
        silences=[
            (
                outcome,
                Link(judgements.get(f"silence_{outcome}", 0), links.judgements_of(bot, window, outcome__exact=outcome)),
            )
            for outcome in SILENCES
        ],
        latency_p50_ms=p50,
        latency_p95_ms=p95,
        token_bars=_bars(totals.tokens_per_day.get(bot.pk, {}), window.days, title="tokens"),
        gate_bars=_gate_bars(totals.outcomes_per_day.get(bot.pk, {}), window.days),
    )


def dashboard_rows(*, now: datetime) -> list[BotRow]:
    """One row per bot, in name order: health and its causes, 24 h and 7 day numbers, each with its admin link."""
    window = _Window.ending(now)
    # The playground's stand-ins are not the hub's bots: their turns and judgements stay out of the front page.
    bots = list(Bot.objects.filter(is_sandbox=False).select_related("primary_model__provider").order_by("name", "pk"))
    totals = _totals_get(window=window)
    links, costs = _AdminLinks.lists_reversed(), bot_costs(now=now, bots=bots)
    rows = [_bot_row(bot=bot, window=window, links=links, totals=totals) for bot in bots]
    for row in rows:
        row.cost = costs.get(row.bot.pk) or row.cost
    return rows
