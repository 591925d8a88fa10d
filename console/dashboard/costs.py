"""Cost per bot in money (A7): the last 24 hours, 7 and 30 days, and per day, primary vs probe vs summaries.

Three grouped queries whatever the history: turns (priced by the model their usage names), judgements (by their
model row) and context summaries (K3: by the model their metadata names; read through the (item_type, created_at)
index), each summed per (bot, day, model, window) in the database. Prices are the models' current prices: a
price changed today re-prices the past, which is what an operator comparing models wants to see.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db.models import BooleanField, ExpressionWrapper, IntegerField, Q, Sum, TextField, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, TruncDate

from agents.models import Bot, LLMModel, Turn
from agents.pricing import Money, Prices
from probe.models import ProbeJudgement
from threadcontext.models import ThreadContextItem

WINDOWS = (("24h", timedelta(hours=24)), ("7d", timedelta(days=7)), ("30d", timedelta(days=30)))
KINDS = ("primary", "probe", "summary")
LONGEST = WINDOWS[-1][1]


@dataclass
class BotCost:
    # window -> kind ("primary", "probe", "summary", "total") -> money
    windows: dict[str, dict[str, Money]] = field(
        default_factory=lambda: {name: {kind: Money() for kind in (*KINDS, "total")} for name, _ in WINDOWS}
    )
    # day -> kind -> money, the last 30 days that had any
    days: dict[date, dict[str, Money]] = field(default_factory=lambda: defaultdict(lambda: {k: Money() for k in KINDS}))

    def add(self, *, kind: str, day: date, windows: list[str], prices: Prices | None, tokens: dict[str, int]) -> None:
        for name in windows:
            self.windows[name][kind].add(prices, **tokens)
            self.windows[name]["total"].add(prices, **tokens)
        self.days[day][kind].add(prices, **tokens)


def _prices(model: LLMModel) -> Prices:
    return Prices(
        currency=model.price_currency,
        input=model.input_price_per_mtok,
        cached_input=model.cached_input_price_per_mtok,
        output=model.output_price_per_mtok,
    )


def _int_key(key: str) -> Coalesce:
    return Coalesce(Sum(Cast(KeyTextTransform(key, "usage"), IntegerField())), 0)


def _windows_of(column: str, now: datetime) -> dict[str, ExpressionWrapper]:
    return {
        f"in_{name}": ExpressionWrapper(Q(**{f"{column}__gte": now - span}), output_field=BooleanField())
        for name, span in WINDOWS
    }


def bot_costs(*, now: datetime, bots: list[Bot]) -> dict[int, BotCost]:
    """The cost of `bots`: primary turns priced by the model named in their usage, probe judgements by their
    model, summaries by the model named in their metadata; tokens of a model without prices count as unpriced."""
    models = list(LLMModel.objects.select_related("provider"))
    by_pk = {model.pk: _prices(model) for model in models}
    by_name = {(model.provider.name, model.name): _prices(model) for model in models}
    costs: dict[int, BotCost] = defaultdict(BotCost)
    bot_ids = [bot.pk for bot in bots]
    turns = Turn.objects.filter(queued_at__gte=now - LONGEST, bot_id__in=bot_ids)
    judgements = ProbeJudgement.objects.filter(created_at__gte=now - LONGEST, bot_id__in=bot_ids)
    turn_windows = _windows_of("queued_at", now)
    for row in (
        turns.annotate(
            day=TruncDate("queued_at"),
            model_name=KeyTextTransform("model", "usage"),
            provider_name=KeyTextTransform("provider", "usage"),
            **turn_windows,
        )
        .values("bot_id", "day", "model_name", "provider_name", *turn_windows)
        .annotate(
            input_tokens=_int_key("input_tokens"),
            output_tokens=_int_key("output_tokens"),
            cached_input_tokens=_int_key("cached_input_tokens"),
        )
    ):
        costs[row["bot_id"]].add(
            kind="primary",
            day=row["day"],
            windows=[name for name, _ in WINDOWS if row[f"in_{name}"]],
            prices=by_name.get((row["provider_name"], row["model_name"])),
            tokens={key: row[key] for key in ("input_tokens", "output_tokens", "cached_input_tokens")},
        )
    judgement_windows = _windows_of("created_at", now)
    for row in (
        judgements.annotate(day=TruncDate("created_at"), **judgement_windows)
        .values("bot_id", "day", "model_id", *judgement_windows)
        .annotate(input_tokens=Coalesce(Sum("input_tokens"), 0), output_tokens=Coalesce(Sum("output_tokens"), 0))
    ):
        costs[row["bot_id"]].add(
            kind="probe",
            day=row["day"],
            windows=[name for name, _ in WINDOWS if row[f"in_{name}"]],
            prices=by_pk.get(row["model_id"]),
            tokens={
                "input_tokens": row["input_tokens"],
                "output_tokens": row["output_tokens"],
                "cached_input_tokens": 0,
            },
        )
    _summary_costs_add(costs, now=now, bots=bots, models=models)
    return costs


def _summary_prices(models: list[LLMModel]) -> dict[tuple[str, str], Prices]:
    """Summaries name their model's provider and name; one stored before the provider was recorded names only
    the model, priced when exactly one provider has a model of that name."""
    prices = {(model.provider.name, model.name): _prices(model) for model in models}
    names = [model.name for model in models]
    prices.update({("", model.name): _prices(model) for model in models if names.count(model.name) == 1})
    return prices


def _summary_costs_add(costs: dict[int, BotCost], *, now: datetime, bots: list[Bot], models: list[LLMModel]) -> None:
    bot_of_bridge = {bot.bridge_id: bot.pk for bot in bots}
    prices = _summary_prices(models)
    windows = _windows_of("created_at", now)
    summaries = ThreadContextItem.objects.filter(
        item_type=ThreadContextItem.ItemType.SUMMARY, created_at__gte=now - LONGEST, bridge_id__in=list(bot_of_bridge)
    )
    for row in (
        summaries.annotate(
            day=TruncDate("created_at"),
            model_name=KeyTextTransform("model", "metadata"),
            provider_name=Coalesce(KeyTextTransform("provider", "metadata"), Value(""), output_field=TextField()),
            **windows,
        )
        .values("bridge_id", "day", "model_name", "provider_name", *windows)
        .annotate(
            input_tokens=Coalesce(Sum(Cast(KeyTextTransform("input_tokens", "metadata"), IntegerField())), 0),
            output_tokens=Coalesce(Sum(Cast(KeyTextTransform("output_tokens", "metadata"), IntegerField())), 0),
        )
    ):
        costs[bot_of_bridge[row["bridge_id"]]].add(
            kind="summary",
            day=row["day"],
            windows=[name for name, _ in WINDOWS if row[f"in_{name}"]],
            prices=prices.get((row["provider_name"], row["model_name"])),
            tokens={
                "input_tokens": row["input_tokens"],
                "output_tokens": row["output_tokens"],
                "cached_input_tokens": 0,
            },
        )
