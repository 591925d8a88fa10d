"""Two connections racing on one row (PostgreSQL): the first holds its transaction open until the second waits."""

import threading
from collections.abc import Callable

from django.db import connection, transaction

# How long a test waits for the second writer to block or finish: a bound on a hang, not a timing.
WAIT_SECONDS = 30


def _blocked_on_a_lock_or_done(worker: threading.Thread) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0 or not worker.is_alive()


def wait_until_blocked_or_done(worker: threading.Thread) -> None:
    for _ in range(WAIT_SECONDS * 20):
        if _blocked_on_a_lock_or_done(worker):
            return
        threading.Event().wait(0.05)
    raise AssertionError("the second writer neither blocked nor finished")


def run_against_a_held_transaction(
    *, hold: Callable[[], object], contend: Callable[[], object]
) -> tuple[object, object]:
    """`hold` runs in a transaction kept open until `contend` (another connection) blocks on it or returns."""
    results: dict[str, object] = {}
    held, release = threading.Event(), threading.Event()

    def first() -> None:
        try:
            with transaction.atomic():
                results["first"] = hold()
                held.set()
                release.wait(WAIT_SECONDS)
        finally:
            held.set()
            connection.close()

    def second() -> None:
        try:
            results["second"] = contend()
        finally:
            connection.close()

    holder = threading.Thread(target=first)
    holder.start()
    assert held.wait(WAIT_SECONDS)
    contender = threading.Thread(target=second)
    contender.start()
    wait_until_blocked_or_done(contender)
    release.set()
    holder.join(WAIT_SECONDS)
    contender.join(WAIT_SECONDS)
    return results.get("first"), results.get("second")
