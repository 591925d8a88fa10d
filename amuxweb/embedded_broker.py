"""The embedded default's broker: kombu's SQLAlchemy transport on its own SQLite file, polled every 0.1 s.

A subclass only because kombu hands every transport option to SQLAlchemy's create_engine (which refuses
`polling_interval`), so the polling interval is set on the class instead (settings.AMUX_EMBEDDED_BROKER_POLL_SECONDS).
Chosen over kombu's filesystem transport: a message is a committed row, never a file a consumer can read before
its producer finished writing it; and over a server: the newcomer's `make run` needs none.
"""

from django.conf import settings
from kombu.transport.sqlalchemy import Transport as SQLAlchemyTransport


class Transport(SQLAlchemyTransport):
    @property
    def polling_interval(self) -> float:  # type: ignore[override]  (a class attribute in kombu)
        return settings.AMUX_EMBEDDED_BROKER_POLL_SECONDS

    @polling_interval.setter
    def polling_interval(self, value: float) -> None:
        pass  # kombu assigns the transport option when given; ours comes from the settings
