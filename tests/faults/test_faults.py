"""The fault suite (issue 10): faults applied to the suite's own Redis, PostgreSQL and worker while signed events
arrive; every acknowledged event is answered exactly once at the Feishu stub (0 lost, 0 duplicated), within the
visibility timeout plus one sweep (plus the backlog's own work), and every event not acknowledged is resent by the
sender until it is, and answered once too. Each test prints its figures in one `FAULTS <name>: ...` line."""

import threading
import time

import pytest

from tests.faults.conftest import (
    DRAIN_SECONDS_PER_EVENT,
    PENDING_AFTER_SECONDS,
    SWEEP_SECONDS,
    VISIBILITY_TIMEOUT_SECONDS,
    SlowModel,
    answers_awaited,
)
from tests.helpers import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

REDIS_DOWN_SECONDS = 12
SLOW_CALL_SECONDS = 4.0
# How long a test waits for the hub to reach the state a fault is applied in, polling often to apply it on time.
WAIT_SECONDS = 120
POLL_SECONDS = 0.05


def at(delay_seconds: float, action) -> threading.Thread:
    """Run `action` `delay_seconds` from now, beside the burst; join the thread to wait for it."""

    def run() -> None:
        time.sleep(delay_seconds)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def bound(*, count: int, extra_seconds: float = 0.0) -> float:
    """The visibility timeout plus one sweep, the sweeper's pending age, and the backlog's work."""
    return (
        VISIBILITY_TIMEOUT_SECONDS
        + SWEEP_SECONDS
        + PENDING_AFTER_SECONDS
        + count * DRAIN_SECONDS_PER_EVENT
        + extra_seconds
    )


def assert_exactly_once(figures, hub) -> None:
    print(figures.line())
    assert (figures.lost, figures.duplicated, figures.never_acked) == (0, 0, 0), f"{figures.line()}\n{hub.tails()}"
    assert figures.answered_within_seconds <= figures.bound_seconds, f"{figures.line()}\n{hub.tails()}"
    # A turn whose reply Feishu has but whose `delivered` mark met the fault stays `replied` until the sweeper
    # resumes it (same uuids: no second message); no turn may end failed, and none may still be running: a turn a
    # killed worker left mid-stream has a card showing a draft, not the answer (issue 10: open for that case).
    assert set(figures.turns) <= {"delivered", "replied"}, f"{figures.line()}\n{hub.tails()}"


def test_redis_stopped_during_intake_of_a_burst(fault_hub, fault_bot, feishu_sender):
    # given: a burst of 40 events over 10 s; Redis stops 3 s in and comes back REDIS_DOWN_SECONDS later, empty
    count = 40
    recovered = {}

    def outage() -> None:
        fault_hub.redis.stop()
        time.sleep(REDIS_DOWN_SECONDS)
        fault_hub.redis.start()
        recovered["at"] = time.monotonic()

    # when
    fault = at(3, outage)
    pushes = feishu_sender.burst(count=count, per_second=4)
    fault.join()
    figures = answers_awaited(
        hub=fault_hub, bot=fault_bot, pushes=pushes, since=recovered["at"], bound_seconds=bound(count=count),
        name="redis_down", redis_down_seconds=REDIS_DOWN_SECONDS,
    )  # fmt: skip
    # then
    assert_exactly_once(figures, fault_hub)


def test_worker_sigkilled_during_the_model_call(fault_hub, fault_bot, feishu_sender):
    # given: a slow model; both workers are waiting for its answer when worker 1 is SIGKILLed
    count = 20
    model = SlowModel(seconds=SLOW_CALL_SECONDS)
    fault_hub.llm.respond_with("openai_chat", model)
    # when
    pushes = feishu_sender.burst(count=count, per_second=10)
    wait_for(
        lambda: model.waiting >= 2,
        what="both workers in a model call",
        hub=fault_hub,
        timeout=WAIT_SECONDS,
        interval=POLL_SECONDS,
    )
    restart = fault_hub.worker_kill(number=1)
    killed_at = time.monotonic()
    model.slow = False
    figures = answers_awaited(
        hub=fault_hub, bot=fault_bot, pushes=pushes, since=killed_at, bound_seconds=bound(count=count),
        name="worker_killed_mid_turn", killed_in_model_call=1,
    )  # fmt: skip
    restart.join()
    # then
    assert_exactly_once(figures, fault_hub)


def test_worker_sigkilled_during_the_feishu_send(fault_hub, fault_bot, feishu_sender):
    # given: Feishu makes each reply, then holds its answer; both workers are waiting for it when worker 1 dies,
    # so its reply exists at Feishu but the worker never heard so
    count = 20
    fault_hub.feishu.send_answer_delay_seconds = SLOW_CALL_SECONDS
    # when
    pushes = feishu_sender.burst(count=count, per_second=10)
    wait_for(
        lambda: fault_hub.feishu.sends_held >= 2,
        what="both workers in a Feishu send",
        hub=fault_hub,
        timeout=WAIT_SECONDS,
        interval=POLL_SECONDS,
    )
    restart = fault_hub.worker_kill(number=1)
    killed_at = time.monotonic()
    fault_hub.feishu.send_answer_delay_seconds = 0.0
    figures = answers_awaited(
        hub=fault_hub, bot=fault_bot, pushes=pushes, since=killed_at, bound_seconds=bound(count=count),
        name="worker_killed_mid_delivery", killed_in_feishu_send=1,
    )  # fmt: skip
    restart.join()
    # then
    assert_exactly_once(figures, fault_hub)


def test_postgres_restarted_during_a_burst(fault_hub, fault_bot, feishu_sender):
    # given: a burst of 40 events over 10 s; PostgreSQL restarts (-m fast) 4 s in, cutting every connection
    count = 40
    restarted = {}

    def restart() -> None:
        began = time.monotonic()
        fault_hub.postgres.restart()
        restarted["at"] = time.monotonic()
        restarted["seconds"] = restarted["at"] - began

    # when
    fault = at(4, restart)
    pushes = feishu_sender.burst(count=count, per_second=4)
    fault.join()
    figures = answers_awaited(
        hub=fault_hub, bot=fault_bot, pushes=pushes, since=restarted["at"], bound_seconds=bound(count=count),
        name="postgres_restart", restart=f"{restarted['seconds']:.1f}s",
    )  # fmt: skip
    # then
    assert_exactly_once(figures, fault_hub)
