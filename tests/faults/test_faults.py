"""The fault suite (issue 10): faults applied to the suite's own Redis, PostgreSQL and worker while signed events
arrive; every acknowledged event is answered exactly once at the Feishu stub (0 lost, 0 duplicated), within the
visibility timeout plus one sweep (plus the backlog's own work), and every event not acknowledged is resent by the
sender until it is, and answered once too. Issue 23 adds a long connection that goes deaf during a burst (its
replacement within the bound, what it missed caught up, 0 lost, 0 duplicated). Each test prints its figures in one
`FAULTS <name>: ...` line."""

import threading
import time

import pytest

from tests.conversation_workers import (
    DEFERRED_LINE,
    GAP_SECONDS,
    QUESTIONS,
    HeldModel,
    WorkerLogs,
    answer_to,
    asked,
    assert_never_overlapped,
    model_inputs,
)
from tests.faults.conftest import (
    DRAIN_SECONDS_PER_EVENT,
    PENDING_AFTER_SECONDS,
    SWEEP_SECONDS,
    VISIBILITY_TIMEOUT_SECONDS,
    SlowModel,
    answers_awaited,
    fault_bot_seed,
    fault_stubs_at_rest,
)
from tests.faults.longconn import RECONNECT_INTERVAL_SECONDS, LongConnectionHub
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


# Issue 23 (D1, D2): the long connection's silence bound for this test (the hub's default is 60 s), the reconnects
# the stub refuses after it, and what a replacement child may take: the supervisor's 1 s check, a new process's
# imports on this busy machine, and one ReconnectInterval (plus its handshake) per refused upgrade.
LONGCONN_SILENCE_SECONDS = 3.0
LONGCONN_REFUSED_RECONNECTS = 2
LONGCONN_DETECTION_SLACK_SECONDS = 2.0  # the watchdog's tick and the state row's write
LONGCONN_CHILD_START_SECONDS = 15.0
LONGCONN_RECOVERY_BOUND_SECONDS = (
    LONGCONN_SILENCE_SECONDS
    + 1.0
    + LONGCONN_CHILD_START_SECONDS
    + LONGCONN_REFUSED_RECONNECTS * (RECONNECT_INTERVAL_SECONDS + 1.0)
)
# No worker is killed here, so a doubled answer could only come from the intake (a message both listed and pushed)
# or the sweeper re-enqueueing a pending event: one sweep past the pending age shows it.
LONGCONN_SETTLE_SECONDS = SWEEP_SECONDS + PENDING_AFTER_SECONDS
# A busy hour: the model answers this slowly during the burst, so both workers are in a model call when the
# connection comes back and the catch-up waits in the queue while the connection stores new messages.
LONGCONN_SLOW_CALL_SECONDS = 6.0


def test_long_connection_goes_deaf_during_a_burst(fault_hub):
    # given: a long-connection bot answering each @ with a reply of its own (follow-up queue), `feishu_connect`
    # keeping its connection with a 3 s silence bound
    fault_stubs_at_rest(fault_hub)
    bot = fault_bot_seed(fault_hub, event_mode="long_connection", queue_mode="followup")
    model = SlowModel(seconds=LONGCONN_SLOW_CALL_SECONDS)
    fault_hub.llm.respond_with("openai_chat", model)
    with LongConnectionHub(hub=fault_hub, bot=bot, silence_seconds=LONGCONN_SILENCE_SECONDS) as world:
        # when: messages at 2/s, every other one an @, the model slow; after 8 (every chat heard from), the
        # connection goes silent and the next two reconnects are refused; messages go on until the replacement is
        # up, then 6 more; then the model is quick again
        burst = world.burst(
            per_second=2,
            before=8,
            after=6,
            refused=LONGCONN_REFUSED_RECONNECTS,
            recovery_timeout=LONGCONN_RECOVERY_BOUND_SECONDS + 10,
            at_reconnect=lambda: model.waiting,
        )
        model.slow = False
        expected = {said.message_id for said in burst.said}
        answer_bound = bound(count=len(burst.mentions))
        deadline = time.monotonic() + answer_bound
        while time.monotonic() < deadline and not (
            expected <= set(world.stored()) and burst.mentions <= set(world.replies())
        ):
            time.sleep(0.25)
        answered_within = time.monotonic() - burst.silent_at - burst.reconnected_seconds
        time.sleep(LONGCONN_SETTLE_SECONDS)
        stored, replies = world.stored(), world.replies()
        detected = world.deaf_detected_seconds(silent_wall=burst.silent_wall)
        by_catchup = world.stored_by_catchup()
        turns = fault_hub.turn_statuses(bot_id=bot.bot_id)
        logs = world.tails()
    # then: nothing lost, nothing doubled, the deaf connection noticed within the bound and replaced within its own
    lost = sum(1 for m in expected if stored[m] == 0) + sum(1 for m in burst.mentions if replies[m] == 0)
    duplicated = sum(stored[m] - 1 for m in expected if stored[m] > 1) + sum(
        replies[m] - 1 for m in burst.mentions if replies[m] > 1
    )
    line = (
        f"FAULTS longconn_deaf: sent={len(burst.said)} mentions={len(burst.mentions)} "
        f"said_while_deaf={sum(s.while_deaf for s in burst.said)} stored={sum(1 for m in expected if stored[m])} "
        f"by_catchup={by_catchup} answered={sum(1 for m in burst.mentions if replies[m])} lost={lost} "
        f"duplicated={duplicated} detected={detected if detected is None else round(detected, 1)}s "
        f"silence_bound={LONGCONN_SILENCE_SECONDS:.0f}s reconnected={burst.reconnected_seconds:.1f}s "
        f"recovery_bound={LONGCONN_RECOVERY_BOUND_SECONDS:.0f}s refused={world.ws.handshakes_refused} "
        f"model_calls_at_reconnect={burst.at_reconnect} "
        f"answered_within={answered_within:.1f}s bound={answer_bound:.0f}s "
        f"turns={','.join(f'{k}:{v}' for k, v in sorted(turns.items()))}"
    )
    print(line)
    assert (lost, duplicated) == (0, 0), f"{line}\n{logs}"
    assert not set(replies) - burst.mentions, f"a message that @-s nobody was answered: {line}"
    assert detected is not None and detected <= LONGCONN_SILENCE_SECONDS + LONGCONN_DETECTION_SLACK_SECONDS, line
    assert burst.reconnected_seconds <= LONGCONN_RECOVERY_BOUND_SECONDS, line
    assert world.ws.handshakes_refused == LONGCONN_REFUSED_RECONNECTS, line
    assert answered_within <= answer_bound, line
    assert set(turns) <= {"delivered", "replied"}, f"{line}\n{logs}"


def test_worker_sigkilled_holding_the_first_turn_of_a_topic(fault_hub, fault_bot, feishu_sender):
    # given: three @-messages in one topic (one conversation; the bot's queue mode is the default, collect), the
    # model holding the first; the later two go to the other worker (each runs one task at a time), which finds
    # the conversation busy and defers them
    model = HeldModel(fault_hub.llm)
    spans_before = len(fault_hub.llm.spans)
    logs = WorkerLogs(fault_hub.workers)
    pushes = [feishu_sender.topic_message(number=1, text=QUESTIONS[0])]
    wait_for(lambda: model.calls, what="the first model call", hub=fault_hub, timeout=WAIT_SECONDS)
    for number, question in enumerate(QUESTIONS[1:], start=2):
        time.sleep(GAP_SECONDS)
        pushes.append(feishu_sender.topic_message(number=number, text=question))
    wait_for(lambda: sum(logs.counts(DEFERRED_LINE)) >= 2, what="both later turns deferred", hub=fault_hub)
    assert sorted(logs.counts(DEFERRED_LINE)) == [0, 2], fault_hub.tails()
    holder = logs.counts(DEFERRED_LINE).index(0) + 1  # the worker that deferred nothing holds the first turn
    # when: that worker is SIGKILLed mid-model-call (and started again); the model answers at once from now on
    restart = fault_hub.worker_kill(number=holder)
    killed_at = time.monotonic()
    model.release.set()
    # then: the conversation goes on once the killed turn's claim is recovered (redelivery or the sweeper): the
    # first message answered, then one reply for the two that waited, under the newest, in that order (a streamed
    # card is one message, whose text is the answer once written)
    message_ids = [push.message_id for push in pushes]
    expected = [(message_ids[0], answer_to(QUESTIONS[0])), (message_ids[2], answer_to(*QUESTIONS[1:]))]

    def replies() -> list[tuple[str, str]]:
        with fault_hub.feishu.lock:
            sent = [s for s in fault_hub.feishu.sent if s["app_id"] == fault_bot.app_id]
        return [(s["parent_id"], fault_hub.feishu.message_text(s)) for s in sent]

    def answered() -> bool:
        found = replies()
        return [parent for parent, _ in found] == [parent for parent, _ in expected] and all(
            answer in text for (_, text), (_, answer) in zip(found, expected, strict=True)
        )

    bound_seconds = bound(count=len(pushes))
    wait_for(answered, what="both replies, answered", hub=fault_hub, timeout=bound_seconds)
    answered_within = time.monotonic() - killed_at
    time.sleep(VISIBILITY_TIMEOUT_SECONDS + SWEEP_SECONDS)  # a doubled reply would show by now
    restart.join()
    turns = fault_hub.query(
        "SELECT source_message_id, status FROM agents_turn WHERE bot_id = %s ORDER BY id", (fault_bot.bot_id,)
    )
    print(
        f"FAULTS conversation_worker_killed: sent={len(pushes)} acked={sum(p.acknowledged for p in pushes)} "
        f"replies={len(replies())} answered_within={answered_within:.1f}s bound={bound_seconds:.0f}s "
        f"turns={','.join(status for _, status in turns)} model_calls={model.calls}"
    )
    assert all(push.acknowledged for push in pushes)
    assert answered(), f"{replies()}\n{fault_hub.tails()}"  # still the two replies, nothing doubled
    # every message answered exactly once: the first and second turns delivered, the third answered by the second
    assert turns == [(message_ids[0], "delivered"), (message_ids[1], "delivered"), (message_ids[2], "skipped")]
    assert answered_within <= bound_seconds
    # one model call at a time: the killed one, its re-run, then the collected two with the first answer before
    assert_never_overlapped(fault_hub.llm.spans[spans_before:])
    assert model.calls == 3
    inputs = model_inputs(fault_hub.llm)[-3:]
    assert [asked(messages[-1][1]) for messages in inputs] == [[QUESTIONS[0]], [QUESTIONS[0]], list(QUESTIONS[1:])]
    assert [content for role, content in inputs[2] if role == "assistant"] == [answer_to(QUESTIONS[0])]
