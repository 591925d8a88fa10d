"""The embedded default's broker: kombu's SQLAlchemy transport on its own SQLite file, polled every 0.1 s.

A subclass only because kombu hands every transport option to SQLAlchemy's create_engine (which refuses
`polling_interval`), so the polling interval is set on the class instead (settings.AMUX_EMBEDDED_BROKER_POLL_SECONDS).
Chosen over kombu's filesystem transport: a message is a committed row, never a file a consumer can read before
its producer finished writing it; and over a server: the newcomer's `make run` needs none.

The file is in WAL mode with synchronous=NORMAL: every idle poll of every worker process is a write transaction
(`BEGIN IMMEDIATE`, kombu's SQLite path), and in SQLite's default rollback-journal mode each one, like each
publish, created, synced and deleted a journal file while holding the lock the webhook's publish waits for; in
WAL a commit appends to the log without a sync (the sync happens at checkpoints) and readers never block the
writer. A message lost to a power cut (never to a process crash) is an InboundEvent the sweeper re-enqueues
(FEISHU_SWEEP_PENDING_AFTER_SECONDS) or a turn the turn sweeper re-runs.

A cold start never races (issue 36, A14): processes started together on a fresh file (`make run`'s two workers,
beat and web) each create the tables and insert each queue's row, and kombu does both check-then-act: the second
CREATE TABLE failed ("already exists": the worker logged "Connection to broker lost") and the second INSERT broke
the queue name's unique constraint (the worker died, and honcho stopped every process); and all but one switch
to WAL failed at once ("database is locked"). Here creating a table another process has just created, or a queue
row another has just inserted, is the same success as creating it, and the switch to WAL waits for the other's.
And none needs to: `manage.py embedded_broker_prepare` (`make run` runs it after migrate, as do the tests that
start a hub) makes the file, its tables and every queue's row before any of them starts.
"""

import sqlite3
import time
from typing import Any

from celery import Celery
from django.conf import settings
from kombu.transport.sqlalchemy import Channel as SQLAlchemyChannel
from kombu.transport.sqlalchemy import Transport as SQLAlchemyTransport
from kombu.transport.sqlalchemy.models import metadata
from sqlalchemy import Engine, event
from sqlalchemy.exc import IntegrityError, OperationalError

SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL")
# How long a connection retries switching a fresh file to WAL while another process switches it: as long as SQLite
# waits for any other lock (pysqlite's default timeout).
WAL_SWITCH_SECONDS = 5.0
WAL_SWITCH_RETRY_SECONDS = 0.01


def _sqlite_connection_tune(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in SQLITE_PRAGMAS:
            _pragma_run(cursor, pragma)
    finally:
        cursor.close()


def _pragma_run(cursor: sqlite3.Cursor, pragma: str) -> None:
    """Switching to WAL takes an exclusive lock and, unlike a write, does not wait for it: on a fresh file, the
    connections of processes starting together fail at once with "database is locked" while one switches. Retried
    until the file is in WAL; the mode is stored in the file, so afterwards the switch is a no-op."""
    deadline = time.monotonic() + WAL_SWITCH_SECONDS
    while True:
        try:
            cursor.execute(pragma)
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(WAL_SWITCH_RETRY_SECONDS)


def tables_create(engine: Engine) -> None:
    """kombu's tables, those missing; one another process creates at the same moment counts as created.

    SQLite runs each CREATE on its own (no transaction around the DDL), so between this process finding a table
    missing and creating it another may have created it: the CREATE then fails with "already exists", and the
    next pass, finding that table, creates only what is still missing. Each pass finds at least one more table,
    so there is at most one pass per table after the first.
    """
    for attempt in range(len(metadata.tables) + 1):
        try:
            metadata.create_all(engine)  # checkfirst: only the tables missing now
            return
        except OperationalError as error:
            if "already exists" not in str(error.orig) or attempt == len(metadata.tables):
                raise


class Channel(SQLAlchemyChannel):
    def _engine_from_config(self) -> Engine:
        engine = super()._engine_from_config()
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_connection_tune)
        # kombu's _open calls metadata.create_all right after this, without a guard: by then every table exists
        # and its own check creates nothing.
        tables_create(engine)
        return engine

    def _get_or_create(self, queue: str) -> Any:
        """The queue's row, inserted if missing. The unique name decides between processes declaring the same new
        queue at once: the one whose insert loses reads the winner's row (kombu's own let the IntegrityError out)."""
        found = self._queue_find(queue)
        if found is not None:
            return found
        self.session.add(self.queue_cls(queue))
        try:
            self.session.commit()
        except IntegrityError:
            self.session.rollback()
        except OperationalError:
            # kombu's swallowed it and returned a row never stored; a connection error lets Celery reconnect
            self.session.rollback()
            raise
        return self._queue_find(queue)

    def _queue_find(self, queue: str) -> Any:
        return self.session.query(self.queue_cls).filter(self.queue_cls.name == queue).first()


class Transport(SQLAlchemyTransport):
    Channel = Channel

    @property
    def polling_interval(self) -> float:  # a class attribute in kombu
        return settings.AMUX_EMBEDDED_BROKER_POLL_SECONDS

    @polling_interval.setter
    def polling_interval(self, value: float) -> None:
        pass  # kombu assigns the transport option when given; ours comes from the settings


def embedded_broker_prepare(*, app: Celery) -> list[str]:
    """The broker's file in WAL mode, its tables and a row for each of the app's queues, made once by one process
    before the hub's processes start; returns the queues declared. None when the app's broker is not this one
    (Redis creates a queue with its first message, and needs no preparing)."""
    with app.connection_for_write() as connection:
        if not isinstance(connection.transport, Transport):
            return []
        channel = connection.default_channel
        for queue in app.amqp.queues.values():
            queue.bind(channel).declare()  # what a worker consuming it declares at its start
    return sorted(app.amqp.queues)
