"""Turn latency percentiles per bot: percentile_disc on PostgreSQL, nearest rank in Python elsewhere."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db import connection
from django.db.models import Aggregate, DurationField, F

from agents.models import Turn
from console.dashboard.health import percentile


class PercentileDisc(Aggregate):
    """PostgreSQL's ordered-set aggregate (nearest rank, like rules.percentile): percentile_disc(fraction) WITHIN GROUP (ORDER BY expression)."""

    function = "percentile_disc"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, *, fraction: float, **extra) -> None:
        super().__init__(expression, fraction=float(fraction), **extra)


def turn_latencies(*, since: datetime) -> dict[int, tuple[int | None, int | None]]:
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
        if started_at is None or finished_at is None:  # `finished` filters both set; the columns are nullable
            continue
        durations[bot_id].append(int((finished_at - started_at).total_seconds() * 1000))
    return {bot_id: (percentile(values, 0.5), percentile(values, 0.95)) for bot_id, values in durations.items()}
