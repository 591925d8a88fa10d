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
"""

from django.conf import settings
from kombu.transport.sqlalchemy import Channel as SQLAlchemyChannel
from kombu.transport.sqlalchemy import Transport as SQLAlchemyTransport
from sqlalchemy import event

SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL")


def _sqlite_connection_tune(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


class Channel(SQLAlchemyChannel):
    def _engine_from_config(self):
        engine = super()._engine_from_config()
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_connection_tune)
        return engine


class Transport(SQLAlchemyTransport):
    Channel = Channel

    @property
    def polling_interval(self) -> float:  # a class attribute in kombu
        return settings.AMUX_EMBEDDED_BROKER_POLL_SECONDS

    @polling_interval.setter
    def polling_interval(self, value: float) -> None:
        pass  # kombu assigns the transport option when given; ours comes from the settings
