"""Plain helpers shared by tests of several apps (fixtures live in tests/conftest.py, not here).

`wait_for` is the one way a test waits for another process (a real Celery worker, the fault suite's hub): it
polls, returns what the predicate found, and on a timeout fails with the other process's log, because a test that
times out against a subprocess is only debuggable with what that process said.
"""

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

Found = TypeVar("Found")


class HasLogTail(Protocol):
    """A Celery worker process a test started (tests.conftest.CeleryWorkerProcess)."""

    def log_tail(self, lines: int = ...) -> str: ...


class HasTails(Protocol):
    """The fault suite's hub of processes (tests.faults.conftest), each with its log."""

    def tails(self) -> str: ...


def wait_for(
    predicate: Callable[[], Found],
    *,
    what: str = "",
    timeout: float = 60.0,
    interval: float = 0.1,
    worker: HasLogTail | None = None,
    hub: HasTails | None = None,
) -> Found:
    """Call `predicate` every `interval` seconds until it returns something truthy, and return that.

    After `timeout` seconds fail the test, naming `what` was awaited, with the log of `worker` or `hub`."""
    deadline = time.monotonic() + timeout
    while True:
        # Checked before the deadline: a condition already true never fails, however short the timeout.
        found = predicate()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}\n{_logs(worker=worker, hub=hub)}")
        time.sleep(interval)


def _logs(*, worker: HasLogTail | None, hub: HasTails | None) -> str:
    if hub is not None:
        return hub.tails()
    return f"worker log:\n{worker.log_tail() if worker is not None else ''}"
