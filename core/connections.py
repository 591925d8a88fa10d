"""Database connections while a turn waits (issue 28: many slow turns in flight).

A turn spends seconds to minutes waiting for its model and a few milliseconds on the database. Django keeps a
connection per thread for CONN_MAX_AGE, so a turns worker with hundreds of threads would hold hundreds of
PostgreSQL connections (max_connections is 100 by default), almost all idle. Instead a turn closes its thread's
connection before it calls the model (the next statement opens a fresh one), and a pool thread closes it when its
task ends: the connections in use are then the threads doing database work at that moment, a handful.
"""

import contextlib
import threading
from collections.abc import Iterator

from django.db import connection


def connection_release() -> None:
    """Close this thread's connection now, unless a transaction is open on it (a caller's, or a test's)."""
    if not connection.in_atomic_block:
        connection.close()


@contextlib.contextmanager
def pool_thread_connection_released() -> Iterator[None]:
    """Run the block; afterwards a pool thread (not a process's main thread) gives its connection back."""
    try:
        yield
    finally:
        if threading.current_thread() is not threading.main_thread():
            connection_release()
