"""The pace of a streaming card's updates (R3): Feishu allows 10 updates per second per card, and every update
is a send of the chat's budget (R4).

An intermediate update goes when all of these hold, else its text is merged into the next one (only the newest
text is ever sent): at least MIN_UPDATE_GAP_SECONDS since the card's last call; `interval` since then, or
`update_chars` new characters waiting; and the chat's and the app's send budget has a send now
(`send_budget_try`, never a wait: a skipped update costs nothing, its text goes with the next one). A card's last
update and its close wait out the gap instead (`gap_wait`), so they always go.

The clock is the process' own monotonic one: it measures gaps between this process' calls, and a re-run after a
crash starts a fresh throttle (Feishu's per-card limit is what it protects, and a crash is a long gap).
"""

from collections.abc import Callable

from django.conf import settings

from feishu.outbound.budget import send_budget_try

# Feishu allows 10 updates per second per card: never two updates of one card closer than this. 120 ms, not
# 100: Feishu counts arrivals, and a request that left 100 ms after another can arrive closer to it.
MIN_UPDATE_GAP_SECONDS = 0.12


class UpdateThrottle:
    """When the current card's next update may go; told when a call to the card leaves (`sent`)."""

    def __init__(
        self,
        *,
        interval_ms: int | None,
        update_chars: int | None,
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        interval = settings.FEISHU_STREAM_UPDATE_INTERVAL_MS if interval_ms is None else interval_ms
        self.interval = max(MIN_UPDATE_GAP_SECONDS, interval / 1000)
        self.update_chars = settings.FEISHU_STREAM_UPDATE_CHARS if update_chars is None else update_chars
        self.monotonic = monotonic
        self.sleep = sleep
        self._last_sent = 0.0  # monotonic time of the last call to the current card

    def update_may_go(self, *, body: str, shown: str, chat_id: str, app_id: str) -> bool:
        """Whether an intermediate update with `body` (the card shows `shown`) goes now; True takes its send
        from the budget, so the caller sends it on a budget whose first send is taken."""
        since = self.monotonic() - self._last_sent
        waiting = len(body) - len(shown)
        if since < MIN_UPDATE_GAP_SECONDS or (since < self.interval and waiting < self.update_chars):
            return False
        return send_budget_try(chat_id=chat_id, app_id=app_id)  # the chat is busy: merged into the next update

    def sent(self) -> None:
        self._last_sent = self.monotonic()

    def gap_wait(self) -> None:
        """Wait until the card may take another call (a last update or a close, which are never skipped)."""
        gap = MIN_UPDATE_GAP_SECONDS - (self.monotonic() - self._last_sent)
        if gap > 0:
            self.sleep(gap)
