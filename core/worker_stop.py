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

The turns worker runs a thread pool (issue 28: hundreds of turns in flight per process, each mostly waiting for
its model). There the SIGTERM reaches the worker's own main thread, which starts Celery's warm shutdown; that waits
for the pool's threads, and honcho's SIGKILL comes first. So on `worker_shutting_down` the main thread hands back
every turn this process is running (`threads_hand_back`, connected in amuxweb.celery), each once, and raises
`WorkerStopping` in each turn's thread (CPython's asynchronous exception): a thread running Python stops at once,
one blocked reading a model's answer stops as its next chunk arrives, before anything of this run is stored. Its
task then sees the turn was already handed back and only acknowledges its message. The stopping worker still
consumes for a moment after the signal: a turn task it receives then is rejected back to the queue (`is_stopping`),
for the next worker, instead of starting a turn the SIGKILL would cut.
"""

import contextlib
import ctypes
import signal
import threading
from collections.abc import Callable, Iterator

from celery.worker import state as worker_state


class WorkerStopping(BaseException):
    """SIGTERM arrived while this child ran a turn: hand the turn back."""


_running_turn: list[int] = []  # the turn this child is running, if any (a list: no `global` statement needed)
_in_pool_child: list[bool] = []  # set in prefork children only (worker_process_init)
# A thread pool's turns: {thread id: (turn id, its task's id)} of the turns running now, and the turns the stop
# handed back.
_thread_turns: dict[int, tuple[int, str]] = {}
_handed_back: set[int] = set()
_threads_lock = threading.Lock()
_stopping = threading.Event()


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
def turn_running(*, turn_id: int, task_id: str = "") -> Iterator[None]:
    """While the block runs in a pool child, a SIGTERM to it raises WorkerStopping inside the block.

    Elsewhere (the solo pool, where the worker's main process runs the task and Celery's own handler starts its
    warm shutdown; eager tests) nothing changes.
    """
    if not _in_pool_child:
        if threading.current_thread() is threading.main_thread():
            yield  # the solo pool or an eager call: Celery's own shutdown, or nothing, applies
            return
        with _thread_turn(turn_id=turn_id, task_id=task_id):
            yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    _running_turn[:] = [turn_id]
    try:
        yield
    finally:
        _running_turn.clear()
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _thread_turn(*, turn_id: int, task_id: str) -> Iterator[None]:
    """A pool thread's turn, registered so that a stop can hand it back and stop the thread."""
    ident = threading.get_ident()
    with _threads_lock:
        _thread_turns[ident] = (turn_id, task_id)
    try:
        yield
    finally:
        # Under the lock: once unregistered, no stop raises into this thread any more.
        with _threads_lock:
            _thread_turns.pop(ident, None)


def was_handed_back(*, turn_id: int) -> bool:
    """Whether this process's stop already handed the turn back (its task must not hand it back again)."""
    with _threads_lock:
        return turn_id in _handed_back


def is_stopping() -> bool:
    """Whether this (thread-pool) worker is stopping: it starts no turn any more."""
    return _stopping.is_set()


def threads_hand_back(*, hand_back: Callable[..., object]) -> list[int]:
    """The worker is stopping: hand back every turn its pool threads run, and stop those threads; the turn ids."""
    _stopping.set()
    with _threads_lock:
        running = dict(_thread_turns)
        _handed_back.update(turn_id for turn_id, _ in running.values())
        for ident in running:
            # Raised at the thread's next Python instruction; it is still inside its turn (registered, under lock).
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(WorkerStopping))
    for turn_id, _ in running.values():
        hand_back(turn_id=turn_id)
    _acknowledge(task_ids={task_id for _, task_id in running.values()})
    return sorted(turn_id for turn_id, _ in running.values())


def _acknowledge(*, task_ids: set[str]) -> None:
    """Acknowledge the handed-back turns' task messages now, as a prefork child's "handed back" return does: the
    SIGKILL that ends a thread still waiting for its model would leave them unacknowledged, and the broker would
    redeliver them (after its visibility timeout) beside the handback's own message. Directly on the message:
    `Request.acknowledge` only schedules the ack on the worker's event loop, which the shutdown stops first."""
    for request in list(worker_state.active_requests):
        if request.id in task_ids and not request.acknowledged:
            request.message.ack()
            request.acknowledged = True
