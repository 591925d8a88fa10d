"""Feishu intake over the long connection (G6): `lark_oapi.ws.Client`, one process per bot app.

The invariant: an event Feishu pushes over the connection is stored exactly like a webhook's, through
`webhook.event_handler_build` (the same registered event types) and `webhook.captured_event_store` (the same
dedupe on message_id, the same enqueue on commit). The SDK calls the processor on its event loop and acks the
frame after it returns, so the processor stores and returns: Feishu wants the ack within 3 s; the model waits. A storage failure raises, the SDK acks with 500 and Feishu
redelivers; a redelivery of a stored event hits the message_id constraint and is acknowledged once more.

Why one process per app: the SDK keeps one module-level event loop (`lark_oapi.ws.client.loop`), so two clients
in one process break (larksuite/oapi-sdk-python #119, #133); a connection runs a fresh one in a thread of its own,
as the caller's thread may be running a loop already (issue 29). The supervisor (`manage.py feishu_connect`) keeps
one child process per bot, restarts a dead one with backoff, and every FEISHU_LONG_CONNECTION_RECONCILE_SECONDS
starts, stops or restarts children for bots enabled, disabled, switched to or from it, or re-keyed in the admin.

Django's ORM refuses to run inside a running event loop, and the SDK's processor is called from one: every database
access of a connection (a card button press's decision too, H1) goes through one thread (`_db`), its DB connection warm.
"""

import asyncio
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from agents.models import Bot
from feishu.channel.approvals import card_action_answer
from feishu.inbound.card_actions import card_press_answer
from feishu.inbound.catchup_runs import catchup_enqueue
from feishu.inbound.connection_state import connection_state_record
from feishu.inbound.watchdog import Verdict, silence_seconds_bound, silence_verdict, tick_seconds
from feishu.inbound.webhook import captured_event_prepare, captured_event_store, event_app_matches, event_handler_build
from feishu.models import CatchupRun, FeishuConnection
from feishu.outbound.sdk import CustomizedEvent, LogLevel, ws_client_module

logger = logging.getLogger(__name__)

# The SDK's websocket client and its module-level event loop (websockets, protobuf): only this process loads them.
lark_ws_client: Any = ws_client_module()  # Any: the SDK ships no types (and sets `loop` on its module)

# The longest a processor waits for its store before the SDK acks 500 (Feishu redelivers); below Feishu's 3 s.
STORE_TIMEOUT_SECONDS = 2.5
ERROR_MAX_CHARS = 500
# A child whose connection went deaf exits with this status: the supervisor replaces it at once (no backoff).
EXIT_DEAF = 3
# The supervisor tells a replacement child why it replaces one (the bot page shows it).
RECONNECT_REASON_ENV = "AMUX_LONGCONN_RECONNECT_REASON"


class StoreTimeoutError(RuntimeError):
    """The store did not finish in time for Feishu's 3 s acknowledgement window."""


class DeafConnectionError(RuntimeError):
    """The connection heard nothing (no event, no pong) for longer than the bound while connected (D1)."""


def _error_text(error: BaseException) -> str:
    # The SDK's exception texts carry codes and messages, never the app secret (it is only in a POST body).
    return f"{type(error).__name__}: {error}"[:ERROR_MAX_CHARS]


class _ObservedClient(lark_ws_client.Client):
    """The SDK's client, telling `LongConnection` when a connection is made or fails, every frame it receives,
    and when its reconnecting gives up.

    The SDK has hooks for reconnecting and reconnected only. The rest is seen by wrapping three of its private
    methods (the one place each happens; pinned SDK version), never by copying them: `_connect` (the first
    connection and a failed attempt), `_handle_message` (every frame: events and pongs, D1's sign of life) and
    `_reconnect` (it raises inside the SDK's receive task when its retries are spent, and the SDK would then sit
    connected to nothing forever).
    """

    def __init__(
        self,
        *args: Any,
        on_connected: Callable[[], None],
        on_error: Callable[[BaseException], None],
        on_frame: Callable[[], None],
        on_gave_up: Callable[[BaseException], None],
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        self._on_connected = on_connected
        self._on_error = on_error
        self._on_frame = on_frame
        self._on_gave_up = on_gave_up

    async def _connect(self) -> None:
        try:
            await super()._connect()
        except Exception as error:
            self._on_error(error)
            raise
        if self._conn is not None:
            self._on_connected()

    async def _handle_message(self, msg: bytes) -> None:
        self._on_frame()
        await super()._handle_message(msg)

    async def _reconnect(self) -> None:
        try:
            await super()._reconnect()
        except Exception as error:
            self._on_gave_up(error)
            raise

    async def ping(self) -> None:
        """One ping now (the SDK's own frame), so that a live connection answers with a pong."""
        await self._write_message(lark_ws_client._new_ping_frame(int(self._service_id)).SerializeToString())


@dataclass
class LongConnection:
    """One bot's long connection, run in the calling thread until `stop()` (a child process runs one).

    `silence_seconds` (default AMUX_LONGCONN_SILENCE_SECONDS) bounds how long it may hear nothing while connected;
    past it `run()` raises DeafConnectionError and the supervisor replaces the child. `reconnect_reason` says
    why this connection replaces an earlier one (the supervisor's restart): it then starts as reconnecting.
    """

    bot: Bot
    domain: str = ""
    silence_seconds: float = 0.0
    reconnect_reason: str = ""
    _loop: asyncio.AbstractEventLoop | None = None
    _db: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=1))
    _has_connected: bool = False
    _client: _ObservedClient | None = None
    _last_frame: float = 0.0  # monotonic time of the last frame received (or of the connection)
    _pinged_at: float | None = None
    _deaf: bool = False
    _gave_up: BaseException | None = None

    def _in_db_thread(self, function: Callable[..., Any], **kwargs: Any) -> Future:
        def run() -> Any:
            close_old_connections()  # a connection the DB dropped while the app was quiet is replaced
            return function(**kwargs)

        return self._db.submit(run)

    def _state(self, **fields: Any) -> None:
        # Fire and forget: the acknowledgement never waits for bookkeeping.
        self._in_db_thread(connection_state_record, bot_pk=self.bot.pk, **fields)

    def _store(self, event: dict[str, Any]) -> None:
        captured_event_store(bot=self.bot, event=event)
        connection_state_record(bot_pk=self.bot.pk, last_event_at=timezone.now(), add_events=1)

    def _process(self, data: CustomizedEvent) -> None:
        # Blocks the SDK's loop for one INSERT (and its enqueue): the ack goes out after it, as Feishu wants.
        event = captured_event_prepare(bot=self.bot, data=data)
        if event is None:
            return  # no column can hold it: acknowledged, never stored (the webhook answers 200-ignored)
        try:
            self._in_db_thread(self._store, event=event).result(timeout=STORE_TIMEOUT_SECONDS)
        except FutureTimeoutError:
            # The SDK acks 500 and Feishu redelivers; if the INSERT lands later, the redelivery meets the dedupe.
            raise StoreTimeoutError(
                f"event not stored within {STORE_TIMEOUT_SECONDS} s; Feishu will redeliver"
            ) from None

    def _press(self, data: Any) -> Any:  # H1: a card button press, decided in the database thread
        return card_press_answer(bot=self.bot, data=data, app_matches=event_app_matches, answer=self._answer)

    def _answer(self, event: dict[str, Any]) -> dict[str, Any]:
        return self._in_db_thread(card_action_answer, bot=self.bot, event=event).result(timeout=STORE_TIMEOUT_SECONDS)

    def _frame(self) -> None:
        self._last_frame = time.monotonic()
        self._pinged_at = None

    def _connected(self) -> None:
        logger.info("feishu long connection up", extra={"bot": self.bot.slug})
        self._frame()  # the silence is counted from the connection
        back = self._has_connected or bool(self.reconnect_reason)
        self._state(
            state=FeishuConnection.State.CONNECTED,
            connected_since=timezone.now(),
            deaf_since=None,
            add_reconnects=1 if back else 0,
            note="connected",
        )
        self._has_connected = True
        if back:  # what Feishu pushed meanwhile is gone (no redelivery here): catch up with it (D2)
            # In the database thread before any frame of this connection is stored (it runs them in order): the
            # catch-up reads from where the stored messages end now, not where they end when a worker takes it.
            self._in_db_thread(catchup_enqueue, bot=self.bot, trigger=CatchupRun.Trigger.RECONNECT)

    def _reconnecting(self) -> None:
        logger.warning("feishu long connection lost; reconnecting", extra={"bot": self.bot.slug})
        why = "the connection was lost; the SDK reconnects"
        self._state(
            state=FeishuConnection.State.RECONNECTING,
            connected_since=None,
            last_reconnect_at=timezone.now(),
            last_reconnect_reason=why,
            note=why,
        )

    def _error(self, error: BaseException) -> None:
        logger.warning("feishu long connection failed", extra={"bot": self.bot.slug, "error": _error_text(error)})
        self._state(last_error=_error_text(error), last_error_at=timezone.now())

    def _given_up(self, error: BaseException) -> None:
        # The SDK stopped reconnecting (its retries are spent): end the child, the supervisor restarts it.
        self._gave_up = error
        if self._loop is not None:
            self._loop.stop()

    async def _watch(self, bound: float) -> None:
        """D1: replace a connection that hears nothing (see feishu.inbound.watchdog)."""
        while True:
            await asyncio.sleep(tick_seconds(bound=bound))
            client = self._client
            if client is None or client._conn is None:
                continue  # not connected: the SDK is reconnecting, or gave up (_given_up)
            now = time.monotonic()
            verdict = silence_verdict(now=now, last_frame_at=self._last_frame, pinged_at=self._pinged_at, bound=bound)
            if verdict is Verdict.PING:
                self._pinged_at = now
                try:
                    await client.ping()
                except Exception as error:  # a failed write is a sign too; the bound decides
                    logger.info("feishu long connection ping failed", extra={"error": _error_text(error)})
            elif verdict is Verdict.DEAF:
                await self._went_deaf(quiet=now - self._last_frame)
                return

    async def _went_deaf(self, *, quiet: float) -> None:
        self._deaf = True
        deaf_since = timezone.now() - timedelta(seconds=quiet)
        why = f"deaf: no frame or pong for {quiet:.1f} s while connected"
        logger.warning("feishu long connection deaf; replacing it", extra={"bot": self.bot.slug, "quiet_s": quiet})
        recorded = self._in_db_thread(
            connection_state_record,
            bot_pk=self.bot.pk,
            state=FeishuConnection.State.DEAF,
            deaf_since=deaf_since,
            note=why,
        )
        await asyncio.wrap_future(recorded)
        assert self._loop is not None
        self._loop.stop()

    def client_build(self) -> _ObservedClient:
        """The SDK client on the bot's credentials, with the webhook's handler builder and our store."""
        handler = event_handler_build(bot=self.bot, processor=self._process, card_processor=self._press)
        client = _ObservedClient(
            self.bot.feishu_app_id,
            self.bot.feishu_app_secret,
            # WARNING: at INFO the SDK logs the connection URL, whose query carries the connection's access key.
            log_level=LogLevel.WARNING,
            event_handler=handler,
            domain=self.domain or settings.FEISHU_LONG_CONNECTION_DOMAIN or settings.FEISHU_DOMAIN,
            on_connected=self._connected,
            on_error=self._error,
            on_frame=self._frame,
            on_gave_up=self._given_up,
        )
        client.on_reconnecting = self._reconnecting
        return client

    def run(self) -> None:
        """Connect and serve until `stop()`; raises when the SDK gives up (bad credentials, retries spent) and
        DeafConnectionError when the connection heard nothing past the bound."""
        # The SDK's methods use its module-level loop, not the running one: each connection sets its own there.
        self._loop = lark_ws_client.loop = asyncio.new_event_loop()
        with ThreadPoolExecutor(1, "longconn", initializer=asyncio.set_event_loop, initargs=(self._loop,)) as thread:
            thread.submit(self._serve, self._loop).result()  # the SDK's failure is raised here, in the caller
        if self._deaf:
            raise DeafConnectionError(f"no frame for {self.silence_seconds or silence_seconds_bound():g} s")
        if self._gave_up is not None:
            raise self._gave_up

    # Long because the start, its three endings (stopped, failed, deaf) and their state rows read best together.
    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        starting: dict[str, Any] = {"state": FeishuConnection.State.CONNECTING, "note": "connecting"}
        if self.reconnect_reason:
            starting = {
                "state": FeishuConnection.State.RECONNECTING,
                "last_reconnect_at": timezone.now(),
                "last_reconnect_reason": self.reconnect_reason,
                "note": "reconnecting",
            }
        self._in_db_thread(
            connection_state_record,
            bot_pk=self.bot.pk,
            connected_since=None,
            hostname=socket.gethostname()[:255],
            pid=os.getpid(),
            **starting,
        ).result()
        failed = False
        watchdog = loop.create_task(self._watch(self.silence_seconds or silence_seconds_bound()))
        try:
            self._client = self.client_build()
            self._client.start()
        except RuntimeError as error:
            if loop.is_running() or "Event loop stopped" not in str(error):
                raise  # not our stop()
        except Exception as error:
            failed = True
            self._in_db_thread(
                connection_state_record,
                bot_pk=self.bot.pk,
                state=FeishuConnection.State.FAILED,
                connected_since=None,
                last_error=_error_text(error),
                last_error_at=timezone.now(),
                note=f"failed: {_error_text(error)}",
            ).result()
            raise
        finally:
            watchdog.cancel()
            self._finish(failed=failed or self._gave_up is not None)

    def _finish(self, *, failed: bool) -> None:
        loop = self._loop
        assert loop is not None  # made by run() before anything that reaches here
        if self._gave_up is not None:
            self._in_db_thread(
                connection_state_record,
                bot_pk=self.bot.pk,
                state=FeishuConnection.State.FAILED,
                connected_since=None,
                last_error=_error_text(self._gave_up),
                last_error_at=timezone.now(),
                note=f"the SDK gave up reconnecting: {_error_text(self._gave_up)}",
            ).result()
        # Cancel the SDK's tasks first (its receive loop would start reconnecting on the close), then close.
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        conn = self._client._conn if self._client is not None else None
        if conn is not None and self._deaf:
            conn.transport.abort()  # a deaf peer would never answer a close handshake: drop the socket
        elif conn is not None:
            loop.run_until_complete(self._client._disconnect())  # type: ignore[union-attr]  # a clean close
        loop.close()
        if not failed and not self._deaf:
            self._in_db_thread(
                connection_state_record,
                bot_pk=self.bot.pk,
                state=FeishuConnection.State.STOPPED,
                connected_since=None,
                note="stopped",
            ).result()
        self._in_db_thread(connections.close_all).result()
        self._db.shutdown(wait=True)

    def stop(self) -> None:
        """Thread-safe: ends `run()` (the state becomes stopped)."""
        if self._loop is not None and not self._loop.is_closed():  # a deaf or failed run has ended already
            self._loop.call_soon_threadsafe(self._loop.stop)

    def flush(self) -> None:
        """Wait for the bookkeeping already submitted (tests read the state row after it)."""
        self._db.submit(lambda: None).result()


def long_connection_child_run(*, bot_pk: int) -> int:
    """A child process's body: one bot's connection until SIGTERM/SIGINT; the exit status for the supervisor
    (0 stopped, EXIT_DEAF deaf, 1 failed or gave up)."""
    bot = Bot.objects.filter(pk=bot_pk, is_enabled=True).first()
    if bot is None:
        logger.warning("feishu long connection: bot not found or disabled", extra={"bot_pk": bot_pk})
        return 1
    connection = LongConnection(bot=bot, reconnect_reason=os.environ.get(RECONNECT_REASON_ENV, ""))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: connection.stop())
    try:
        connection.run()
    except DeafConnectionError:
        return EXIT_DEAF  # already logged and recorded
    except Exception:
        logger.exception("feishu long connection gave up", extra={"bot": bot.slug})
        return 1
    return 0
