"""A graceful stop of a prefork worker child while it runs a turn (issue 30, finding 10).

honcho (and systemd, Kubernetes, ...) stop the worker by sending SIGTERM to its whole process group, so each pool
child gets it too. Celery resets a child's SIGTERM to the default action, so the child died mid-turn: the turn
stayed `running` until the sweeper's stale window (the task's hard time limit plus a minute, about six minutes)
and its model call was paid twice. honcho also sends SIGKILL five seconds later, so a model call cannot be
waited for. Instead the child hands the turn back at once: the SIGTERM raises `WorkerStopping` in the task (a
BaseException, so the pipeline's `except Exception` poison handling never mistakes it for the turn's failure),
the task releases the turn's claim and re-enqueues it, and returns; the master's warm shutdown then finds no task
running. The next worker runs the turn as soon as it starts. A child that runs anything else (an intake event,
a delivery: short, idempotent) ignores the signal and finishes within the warm shutdown.

Process-global state is right here: a prefork child runs one task at a time, on its main thread, which is where
Python runs signal handlers.
"""

import contextlib
import signal
from collections.abc import Iterator


class WorkerStopping(BaseException):
    """SIGTERM arrived while this child ran a turn: hand the turn back."""


_running_turn: list[int] = []  # the turn this child is running, if any (a list: no `global` statement needed)
_in_pool_child: list[bool] = []  # set in prefork children only (worker_process_init)


def _on_sigterm(signum: int, frame: object) -> None:
    if _running_turn:
        turn_id = _running_turn.pop()  # raised once: the hand-back itself is not interrupted by a second signal
        raise WorkerStopping(turn_id)


def pool_child_mark(**_: object) -> None:
    """Celery's `worker_process_init` receiver (amuxweb.celery): this process is a prefork pool child.

    The handler itself is installed per turn (`turn_running`): billiard resets the child's SIGTERM to its own
    exit handler after this signal, and outside a turn that handler is the right one.
    """
    _in_pool_child[:] = [True]


@contextlib.contextmanager
def turn_running(*, turn_id: int) -> Iterator[None]:
    """While the block runs in a pool child, a SIGTERM to it raises WorkerStopping inside the block.

    Elsewhere (the solo pool, where the worker's main process runs the task and Celery's own handler starts its
    warm shutdown; eager tests) nothing changes.
    """
    if not _in_pool_child:
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _running_turn[:] = [turn_id]
    try:
        yield
    finally:
        _running_turn.clear()
        signal.signal(signal.SIGTERM, previous)
