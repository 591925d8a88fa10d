"""The long connection's watchdog rule (D1): a connection that hears nothing is deaf, whatever the SDK reports.

The SDK's connection can stay "connected" on a half-open socket, so the child tracks the last frame it received
(events and the SDK's pongs both are frames) and judges the silence with `silence_verdict` (pure). A quiet app
has no events, and the SDK pings only every PingInterval (Feishu says 120 s, longer than the bound): the child
sends a ping of its own once the silence reaches a third of the bound, so a live connection always answers well
within it, and only a deaf one stays silent past it.
"""

from enum import Enum

from django.conf import settings

# A ping is sent after this fraction of the bound without a frame; the bound leaves two more such intervals.
PING_AFTER_FRACTION = 1 / 3
# The watchdog looks at the silence this often (at most; a short test bound looks more often).
TICK_MAX_SECONDS = 1.0


class Verdict(Enum):
    HEARING = "hearing"
    PING = "ping"  # quiet long enough that a pong should be asked for
    DEAF = "deaf"


def silence_seconds_bound() -> float:
    """How long a connected connection may hear nothing before it is replaced (AMUX_LONGCONN_SILENCE_SECONDS)."""
    return float(settings.AMUX_LONGCONN_SILENCE_SECONDS)


def tick_seconds(*, bound: float) -> float:
    return min(TICK_MAX_SECONDS, bound / 10)


def silence_verdict(*, now: float, last_frame_at: float, pinged_at: float | None, bound: float) -> Verdict:
    """What a connected connection's silence means (pure; monotonic seconds).

    `pinged_at`: when the watchdog last pinged since the last frame (None: not yet).
    """
    quiet = now - last_frame_at
    if quiet > bound:
        return Verdict.DEAF
    if quiet >= bound * PING_AFTER_FRACTION and pinged_at is None:
        return Verdict.PING
    return Verdict.HEARING
