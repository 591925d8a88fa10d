"""Pure rules of the dashboard: which health state a bot is in, and how a bar chart is scaled."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

# Worst first: the state shown is the first cause that holds; every cause that holds is listed. The short label
# is the badge; the sentence says what is wrong where the cause is listed, and links to the page that fixes it.
HEALTH_CAUSES = {
    "provider_test_failed": _("provider's last test failed"),
    "credentials_refused": _("Feishu refused the credentials"),
    "connection_down": _("long connection down"),
    "failing_closed": _("failing closed"),
    "turns_failing": _("turns failing"),
    "deliveries_failing": _("deliveries failing"),
    "webhook_refused": _("webhook requests refused"),
    "feishu_not_set_up": _("no Feishu app yet"),
}
HEALTH_SENTENCES = {
    "provider_test_failed": _("The primary model's provider failed its last connection test: test it again."),
    "credentials_refused": _("Feishu refused the app id and secret at the last check: correct them and verify."),
    "connection_down": _("The long connection is not connected: no events arrive; see its state and last error."),
    "failing_closed": _("The discuss gate failed closed in the last 24 hours: the bot stayed silent."),
    "turns_failing": _("Turns failed in the last 24 hours: see their errors."),
    "deliveries_failing": _("Replies were not delivered to Feishu in the last 24 hours: see why."),
    "webhook_refused": _(
        "Feishu's requests to this bot's webhook were refused in the last 24 hours (wrong token, key or signature?):"
        " see the reasons on the bot page and compare the credentials."
    ),
    "feishu_not_set_up": _("No Feishu app and no event received: follow the setup page."),
}
# The gate's outcomes in words (A9); the code stays beside them in small print.
OUTCOME_WORDS = {
    "act": _("spoke"),
    "no_action": _("nothing to add"),
    "missing": _("no verdict"),
    "malformed": _("unreadable verdict"),
    "error": _("judge failed"),
    "disabled": _("gate off"),
}
# Problems that leave the bot working (yellow) rather than broken (red).
# Refused webhook requests (D3) are a warning: an outsider's requests are refused too, while the bot works.
WARNINGS = frozenset({"feishu_not_set_up", "webhook_refused"})
HEALTHY = "healthy"


class Credentials:
    """What the last check of the bot's Feishu app found (feishu.FeishuCredentialCheck)."""

    OK = "ok"
    REFUSED = "refused"
    UNVERIFIED = "unverified"  # an app id and secret, never checked yet
    MISSING = "missing"  # no app id or secret: replies are recorded, not sent


@dataclass(frozen=True)
class HealthInputs:
    provider_test_failed: bool
    failed_closed_24h: int
    failed_turns_24h: int
    failed_deliveries_24h: int
    credentials: str = Credentials.OK
    # A long-connection bot whose connection is not connected or connecting (or that never started).
    connection_down: bool = False
    # An event was received (webhook or long connection) in the last 7 days.
    events_recent: bool = False
    # A webhook request for this bot was refused in the last 24 hours (D3: bad signature, wrong token, ...).
    webhook_refused_24h: bool = False


def health_causes(inputs: HealthInputs) -> list[str]:
    """Every cause that holds, worst first; an empty list is healthy. A bot without a Feishu app that still
    receives events (the demo's local webhook credentials) is not flagged: its replies are recorded by design."""
    holds = {
        "provider_test_failed": inputs.provider_test_failed,
        "credentials_refused": inputs.credentials == Credentials.REFUSED,
        "connection_down": inputs.connection_down,
        "failing_closed": inputs.failed_closed_24h > 0,
        "turns_failing": inputs.failed_turns_24h > 0,
        "deliveries_failing": inputs.failed_deliveries_24h > 0,
        "webhook_refused": inputs.webhook_refused_24h,
        "feishu_not_set_up": inputs.credentials == Credentials.MISSING and not inputs.events_recent,
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
