"""Issue 28: a stopping thread-pool worker (the Procfile's `turns`) hands back each running turn once and stops the
threads running them (core.worker_stop); the real worker's stop is in tests/agents/test_worker_graceful_stop.py."""

import threading
import time

import pytest

from core import worker_stop


@pytest.fixture
def fresh_stop_state():
    yield
    worker_stop._stopping.clear()
    worker_stop._handed_back.clear()
    worker_stop._thread_turns.clear()


def test_i28_a_stop_hands_back_each_running_turn_once_and_stops_its_thread(fresh_stop_state):
    # given: a pool thread running turn 7 (a loop standing in for a streamed model answer)
    entered, outcome = threading.Event(), []

    def pool_thread() -> None:
        try:
            with worker_stop.turn_running(turn_id=7, task_id="task-7"):
                entered.set()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    time.sleep(0.01)
            outcome.append("ran to its end")
        except worker_stop.WorkerStopping:
            outcome.append("stopped")

    thread = threading.Thread(target=pool_thread)
    thread.start()
    assert entered.wait(5)
    handed: list[int] = []

    # when: the worker is told to stop
    returned = worker_stop.threads_hand_back(hand_back=lambda *, turn_id: handed.append(turn_id))
    thread.join(5)

    # then: the turn was handed back once, its thread stopped at once, and the worker starts no new turn
    assert (returned, handed, outcome) == ([7], [7], ["stopped"])
    assert worker_stop.was_handed_back(turn_id=7) and not worker_stop.was_handed_back(turn_id=8)
    assert worker_stop.is_stopping()


def test_i28_a_turn_on_the_main_thread_is_not_registered(fresh_stop_state):
    # the solo pool and eager runs: Celery's own shutdown applies, nothing is handed back by the thread stop
    with worker_stop.turn_running(turn_id=9):
        assert worker_stop._thread_turns == {}
    assert worker_stop.threads_hand_back(hand_back=lambda **_: pytest.fail("handed back")) == []
