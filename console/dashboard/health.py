"""Pure rules of the dashboard: which health state a bot is in, and how a bar chart is scaled."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

# Worst first: the state shown is the first cause that holds; every cause that holds is listed.
HEALTH_CAUSES = {
    "provider_test_failed": _("provider's last test failed"),
    "failing_closed": _("failing closed"),
    "turns_failing": _("turns failing"),
    "deliveries_failing": _("deliveries failing"),
    "feishu_not_connected": _("Feishu not connected"),
}
HEALTHY = "healthy"


@dataclass(frozen=True)
class HealthInputs:
    provider_test_failed: bool
    failed_closed_24h: int
    failed_turns_24h: int
    failed_deliveries_24h: int
    has_feishu_credentials: bool


def health_causes(inputs: HealthInputs) -> list[str]:
    """Every cause that holds, worst first; an empty list is healthy."""
    holds = {
        "provider_test_failed": inputs.provider_test_failed,
        "failing_closed": inputs.failed_closed_24h > 0,
        "turns_failing": inputs.failed_turns_24h > 0,
        "deliveries_failing": inputs.failed_deliveries_24h > 0,
        "feishu_not_connected": not inputs.has_feishu_credentials,
    }
    return [cause for cause in HEALTH_CAUSES if holds[cause]]


def percentile(values: list[int], fraction: float) -> int | None:
    """Nearest-rank percentile; None for no values. The fallback where the database has no percentile_disc."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-int(round(fraction * 1000)) * len(ordered) // 1000))  # ceil(fraction * n) without floats
    return ordered[min(rank, len(ordered)) - 1]


def bar_heights(values: list[int], *, height: int) -> list[int]:
    """Pixel heights of bars scaled to the largest value; a non-zero value is at least 1 px so it stays visible."""
    top = max(values, default=0)
    if top <= 0:
        return [0 for _ in values]
    return [max(1, value * height // top) if value > 0 else 0 for value in values]


@dataclass(frozen=True)
class Segment:
    name: str
    value: int
    y: int
    height: int


def stacked_bars(series: dict[str, list[int]], *, height: int) -> list[list[Segment]]:
    """Per position, the non-zero segments of every series stacked bottom-up, scaled to the tallest stack."""
    length = len(next(iter(series.values()), []))
    totals = [sum(values[index] for values in series.values()) for index in range(length)]
    top = max(totals, default=0)
    columns: list[list[Segment]] = []
    for index in range(length):
        column, base = [], height
        for name, values in series.items():
            value = values[index]
            if value <= 0:
                continue
            size = max(1, value * height // top)
            base -= size
            column.append(Segment(name=name, value=value, y=base, height=size))
        columns.append(column)
    return columns
