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
import hashlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections
from django.db.models import F
from django.utils import timezone

from agents.models import Bot
from feishu.channel.approvals import card_action_answer
from feishu.inbound.card_actions import card_press_answer
from feishu.inbound.webhook import captured_event_prepare, captured_event_store, event_app_matches, event_handler_build
from feishu.models import FeishuConnection
from feishu.outbound.sdk import CustomizedEvent, LogLevel, ws_client_module

logger = logging.getLogger(__name__)

# The SDK's websocket client and its module-level event loop (websockets, protobuf): only this process loads them.
lark_ws_client: Any = ws_client_module()  # Any: the SDK ships no types (and sets `loop` on its module)

# The longest a processor waits for its store before the SDK acks 500 (Feishu redelivers); below Feishu's 3 s.
STORE_TIMEOUT_SECONDS = 2.5
# A dead child is restarted after min(RESTART_BACKOFF_MAX_SECONDS, RESTART_BACKOFF_BASE_SECONDS * 2**failures);
# a child that stayed up RESTART_RESET_AFTER_SECONDS starts again from the base.
RESTART_BACKOFF_BASE_SECONDS = 1.0
RESTART_BACKOFF_MAX_SECONDS = 60.0
RESTART_RESET_AFTER_SECONDS = 300.0
# A stopping child gets this long to close its connection before it is killed.
CHILD_STOP_TIMEOUT_SECONDS = 10.0
ERROR_MAX_CHARS = 500


class StoreTimeoutError(RuntimeError):
    """The store did not finish in time for Feishu's 3 s acknowledgement window."""


@dataclass(frozen=True)
class LongConnectionBot:
    """What the supervisor needs to know about a long-connection bot: who, and whether its keys changed."""

    pk: int
    slug: str
    fingerprint: str  # a digest of the app's credentials: a re-keyed bot's child is restarted


def _credentials_fingerprint(bot: Bot) -> str:
    material = "\0".join(
        [bot.feishu_app_id, bot.feishu_app_secret, bot.feishu_encrypt_key, bot.feishu_verification_token]
    )
    return hashlib.sha256(material.encode()).hexdigest()[:16]  # never logged with the secrets it digests


def long_connection_bots_list(*, slugs: Sequence[str] = ()) -> list[LongConnectionBot]:
    """Enabled bots whose event mode is the long connection and that have an app id and secret."""
    bots = Bot.objects.filter(is_enabled=True, feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION).exclude(
        feishu_app_id=""
    )
    if slugs:
        bots = bots.filter(slug__in=list(slugs))
    return [
        LongConnectionBot(pk=bot.pk, slug=bot.slug, fingerprint=_credentials_fingerprint(bot))
        for bot in bots.order_by("pk")
        if bot.feishu_app_secret
    ]


def connection_state_record(*, bot_pk: int, add_reconnects: int = 0, add_events: int = 0, **fields: Any) -> None:
    """Write the bot's connection row (created on first use); the counters are incremented in the UPDATE."""
    updates: dict[str, Any] = {**fields, "updated_at": timezone.now()}
    if add_reconnects:
        updates["reconnects"] = F("reconnects") + add_reconnects
    if add_events:
        updates["events_received"] = F("events_received") + add_events
    if not FeishuConnection.objects.filter(bot_id=bot_pk).update(**updates):
        FeishuConnection.objects.get_or_create(bot_id=bot_pk)  # one row per bot: a racing creator is harmless
        FeishuConnection.objects.filter(bot_id=bot_pk).update(**updates)


def _error_text(error: BaseException) -> str:
    # The SDK's exception texts carry codes and messages, never the app secret (it is only in a POST body).
    return f"{type(error).__name__}: {error}"[:ERROR_MAX_CHARS]


class _ObservedClient(lark_ws_client.Client):
    """The SDK's client, telling `LongConnection` when a connection is made or fails.

    The SDK has hooks for reconnecting and reconnected only; the first connection and a failed attempt are
    seen by wrapping `_connect` (private, but the one place both happen; pinned SDK version).
    """

    def __init__(self, *args: Any, on_connected: Callable[[], None], on_error: Callable[[BaseException], None], **kw):
        super().__init__(*args, **kw)
        self._on_connected = on_connected
        self._on_error = on_error

    async def _connect(self) -> None:
        try:
            await super()._connect()
        except Exception as error:
            self._on_error(error)
            raise
        if self._conn is not None:
            self._on_connected()


@dataclass
class LongConnection:
    """One bot's long connection, run in the calling thread until `stop()` (a child process runs one)."""

    bot: Bot
    domain: str = ""
    _loop: asyncio.AbstractEventLoop | None = None
    _db: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=1))
    _has_connected: bool = False
    _client: _ObservedClient | None = None

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

    def _connected(self) -> None:
        logger.info("feishu long connection up", extra={"bot": self.bot.slug})
        self._state(
            state=FeishuConnection.State.CONNECTED,
            connected_since=timezone.now(),
            add_reconnects=1 if self._has_connected else 0,
        )
        self._has_connected = True

    def _reconnecting(self) -> None:
        logger.warning("feishu long connection lost; reconnecting", extra={"bot": self.bot.slug})
        self._state(state=FeishuConnection.State.RECONNECTING, connected_since=None)

    def _error(self, error: BaseException) -> None:
        logger.warning("feishu long connection failed", extra={"bot": self.bot.slug, "error": _error_text(error)})
        self._state(last_error=_error_text(error), last_error_at=timezone.now())

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
        )
        client.on_reconnecting = self._reconnecting
        return client

    def run(self) -> None:
        """Connect and serve until `stop()`; raises when the SDK gives up (bad credentials, retries spent)."""
        # The SDK's methods use its module-level loop, not the running one: each connection sets its own there.
        self._loop = lark_ws_client.loop = asyncio.new_event_loop()
        with ThreadPoolExecutor(1, "longconn", initializer=asyncio.set_event_loop, initargs=(self._loop,)) as thread:
            thread.submit(self._serve, self._loop).result()  # the SDK's failure is raised here, in the caller

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        self._in_db_thread(
            connection_state_record,
            bot_pk=self.bot.pk,
            state=FeishuConnection.State.CONNECTING,
            connected_since=None,
            hostname=socket.gethostname()[:255],
            pid=os.getpid(),
        ).result()
        failed = False
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
            ).result()
            raise
        finally:
            self._finish(failed=failed)

    def _finish(self, *, failed: bool) -> None:
        loop = self._loop
        assert loop is not None  # made by run() before anything that reaches here
        # Cancel the SDK's tasks first (its receive loop would start reconnecting on the close), then close.
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        if self._client is not None and self._client._conn is not None:
            loop.run_until_complete(self._client._disconnect())  # a clean close, not a dropped socket
        loop.close()
        if not failed:
            self._in_db_thread(
                connection_state_record, bot_pk=self.bot.pk, state=FeishuConnection.State.STOPPED, connected_since=None
            ).result()
        self._in_db_thread(connections.close_all).result()
        self._db.shutdown(wait=True)

    def stop(self) -> None:
        """Thread-safe: ends `run()` (the state becomes stopped)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def flush(self) -> None:
        """Wait for the bookkeeping already submitted (tests read the state row after it)."""
        self._db.submit(lambda: None).result()


def long_connection_child_run(*, bot_pk: int) -> int:
    """A child process's body: one bot's connection until SIGTERM/SIGINT; the exit status for the supervisor."""
    bot = Bot.objects.filter(pk=bot_pk, is_enabled=True).first()
    if bot is None:
        logger.warning("feishu long connection: bot not found or disabled", extra={"bot_pk": bot_pk})
        return 1
    connection = LongConnection(bot=bot)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: connection.stop())
    try:
        connection.run()
    except Exception:
        logger.exception("feishu long connection gave up", extra={"bot": bot.slug})
        return 1
    return 0


def restart_delay_seconds(*, failures: int) -> float:
    """Backoff before restarting a child that died `failures` times in a row (pure)."""
    return min(RESTART_BACKOFF_MAX_SECONDS, RESTART_BACKOFF_BASE_SECONDS * 2 ** max(0, failures - 1))


@dataclass
class _Child:
    bot: LongConnectionBot
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float = 0.0


@dataclass
class LongConnectionSupervisor:
    """Keeps one child process per long-connection bot (see the module docstring)."""

    child_command: Callable[[int], list[str]]
    slugs: Sequence[str] = ()
    reconcile_seconds: float = 30.0
    clock: Callable[[], float] = time.monotonic
    children: dict[int, _Child] = field(default_factory=dict)
    _stopping: bool = False

    def _start(self, child: _Child) -> None:
        child.process = subprocess.Popen(self.child_command(child.bot.pk))
        child.started_at = self.clock()
        logger.info("feishu long connection child started", extra={"bot": child.bot.slug, "pid": child.process.pid})

    def _stop(self, child: _Child) -> None:
        process = child.process
        child.process = None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=CHILD_STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        logger.info("feishu long connection child stopped", extra={"bot": child.bot.slug})

    def reconcile(self, bots: Iterable[LongConnectionBot]) -> None:
        """Start children for new bots, stop those of gone bots, restart those whose credentials changed."""
        wanted = {bot.pk: bot for bot in bots}
        for pk in list(self.children):
            child = self.children[pk]
            if pk not in wanted or wanted[pk].fingerprint != child.bot.fingerprint:
                self._stop(child)
                del self.children[pk]
        for pk, bot in wanted.items():
            if pk not in self.children:
                child = _Child(bot=bot)
                self.children[pk] = child
                self._start(child)

    def check(self) -> None:
        """Restart dead children, each after its backoff."""
        now = self.clock()
        for child in self.children.values():
            if child.process is not None and child.process.poll() is not None:
                code = child.process.returncode
                uptime = now - child.started_at
                child.failures = 1 if uptime >= RESTART_RESET_AFTER_SECONDS else child.failures + 1
                child.restart_at = now + restart_delay_seconds(failures=child.failures)
                child.process = None
                logger.warning(
                    "feishu long connection child died; restarting after backoff",
                    extra={"bot": child.bot.slug, "exit_code": code, "restart_in_s": child.restart_at - now},
                )
            if child.process is None and now >= child.restart_at:
                self._start(child)

    def stop_all(self) -> None:
        for child in self.children.values():
            if child.process is not None and child.process.poll() is None:
                child.process.terminate()
        for child in self.children.values():
            self._stop(child)
        self.children.clear()

    def request_stop(self, *_: object) -> None:
        self._stopping = True

    def run(self, *, bots_list: Callable[[], list[LongConnectionBot]]) -> None:
        """Until SIGTERM/SIGINT: reconcile every reconcile_seconds, check children every second."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.request_stop)
        next_reconcile = 0.0
        try:
            while not self._stopping:
                if self.clock() >= next_reconcile:
                    next_reconcile = self.clock() + self.reconcile_seconds
                    close_old_connections()
                    try:
                        bots = bots_list()
                    except DatabaseError:
                        # Keep the running children; exiting would make honcho stop the whole `make run`.
                        logger.exception("feishu_connect could not read the bots; keeping the running connections")
                    else:
                        self.reconcile(bots)
                self.check()
                time.sleep(1.0)
        finally:
            self.stop_all()
