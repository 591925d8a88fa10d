"""`manage.py feishu_connect`'s supervisor: one child process per long-connection bot, never left dead (G6, D1).

A child that exits is restarted: at once when it exited because its connection went deaf (its own watchdog,
feishu.inbound.watchdog: it heard nothing for the bound), else after a backoff that doubles up to a minute, for
as long as the bot wants a long connection (a connection the SDK gave up on, bad credentials, a crash alike).
The restart's reason is written to the bot's connection row and handed to the new child, which reports itself
reconnecting rather than connecting.
"""

import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from agents.models import Bot
from feishu.inbound.connection_state import connection_state_record
from feishu.inbound.longconn import EXIT_DEAF, RECONNECT_REASON_ENV
from feishu.models import FeishuConnection

logger = logging.getLogger(__name__)

# A dead child is restarted after min(RESTART_BACKOFF_MAX_SECONDS, RESTART_BACKOFF_BASE_SECONDS * 2**failures);
# a child that stayed up RESTART_RESET_AFTER_SECONDS starts again from the base.
RESTART_BACKOFF_BASE_SECONDS = 1.0
RESTART_BACKOFF_MAX_SECONDS = 60.0
RESTART_RESET_AFTER_SECONDS = 300.0
# A stopping child gets this long to close its connection before it is killed.
CHILD_STOP_TIMEOUT_SECONDS = 10.0


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


def restart_delay_seconds(*, failures: int) -> float:
    """Backoff before restarting a child that died `failures` times in a row (pure)."""
    return min(RESTART_BACKOFF_MAX_SECONDS, RESTART_BACKOFF_BASE_SECONDS * 2 ** max(0, failures - 1))


def restart_reason(*, exit_code: int | None, delay_seconds: float) -> str:
    """Why a child is being replaced, in the words the bot page shows (pure)."""
    if exit_code == EXIT_DEAF:
        return "replaced: the connection was deaf (no frame or pong within the bound)"
    return f"restarted after {delay_seconds:g} s backoff: the connection ended (exit {exit_code})"


@dataclass
class _Child:
    bot: LongConnectionBot
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float = 0.0
    reason: str = ""  # why the next start replaces a previous child ("" for the first)


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
        env = {**os.environ, RECONNECT_REASON_ENV: child.reason} if child.reason else None
        child.process = subprocess.Popen(self.child_command(child.bot.pk), env=env)
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

    def _died(self, child: _Child, *, now: float) -> None:
        assert child.process is not None
        code = child.process.returncode
        child.process = None
        if code == EXIT_DEAF:
            delay = 0.0  # a deaf child lived the whole bound: its replacement starts at once
        else:
            uptime = now - child.started_at
            child.failures = 1 if uptime >= RESTART_RESET_AFTER_SECONDS else child.failures + 1
            delay = restart_delay_seconds(failures=child.failures)
        child.restart_at = now + delay
        child.reason = restart_reason(exit_code=code, delay_seconds=delay)
        logger.warning(
            "feishu long connection child ended; replacing it",
            extra={"bot": child.bot.slug, "exit_code": code, "restart_in_s": delay},
        )
        try:
            connection_state_record(
                bot_pk=child.bot.pk,
                state=FeishuConnection.State.RECONNECTING,
                connected_since=None,
                last_reconnect_at=timezone.now(),
                last_reconnect_reason=child.reason,
                note=child.reason,
            )
        except DatabaseError:  # the row is bookkeeping: the restart happens whatever the database says
            logger.warning("feishu long connection state could not be written", extra={"bot": child.bot.slug})

    def check(self) -> None:
        """Restart ended children: a deaf one at once, any other after its backoff."""
        now = self.clock()
        for child in self.children.values():
            if child.process is not None and child.process.poll() is not None:
                self._died(child, now=now)
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


def child_command_for(*, manage_py: str) -> Callable[[int], list[str]]:
    """The command line of one bot's child: this interpreter, this manage.py, the hidden --child option."""
    return lambda bot_pk: [sys.executable, manage_py, "feishu_connect", "--child", str(bot_pk)]
