"""D1: a long connection that hears nothing is noticed within the bound and replaced; one the SDK gave up on is
restarted with backoff, never left dead. The real `lark_oapi.ws.Client` against the local stub, which goes
silent (socket open, no frames, no pongs) and refuses reconnects on demand."""

import sys
import threading
import time

import pytest
from django.utils import timezone

from agents.models import Turn
from feishu.inbound.connection_state import connection_history, connection_state_record
from feishu.inbound.longconn import EXIT_DEAF, DeafConnectionError, LongConnection
from feishu.inbound.supervisor import LongConnectionBot, LongConnectionSupervisor, restart_delay_seconds
from feishu.inbound.watchdog import Verdict, silence_verdict
from feishu.models import FeishuConnection, InboundEvent
from tests.feishu.test_longconn import dm_payload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SILENCE = 2.0  # the bound in these tests (the hub's default is 60 s)
SLACK = 1.5  # the watchdog's tick, a ping's write and the state row's write


@pytest.fixture
def bot(long_connection_bot):
    return long_connection_bot  # the shared fixture (tests/feishu/conftest.py), under this module's shorter name


class Running:
    """A LongConnection in a thread, as a child process runs it; `ended` holds what run() raised."""

    def __init__(self, connection: LongConnection) -> None:
        self.connection = connection
        self.ended: list[BaseException | None] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.connection.run()
        except BaseException as error:  # noqa: BLE001 - the test reads what ended it
            self.ended.append(error)
        else:
            self.ended.append(None)

    def stop(self) -> None:
        self.connection.stop()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive()


@pytest.fixture
def run_connection():
    running: list[Running] = []

    def start(connection: LongConnection) -> Running:
        running.append(Running(connection))
        return running[-1]

    yield start
    for item in running:
        item.stop()


def test_d1_silence_rule():
    assert silence_verdict(now=10.0, last_frame_at=9.5, pinged_at=None, bound=60) is Verdict.HEARING
    assert silence_verdict(now=30.0, last_frame_at=9.0, pinged_at=None, bound=60) is Verdict.PING
    assert silence_verdict(now=30.0, last_frame_at=9.0, pinged_at=29.0, bound=60) is Verdict.HEARING
    assert silence_verdict(now=70.0, last_frame_at=9.0, pinged_at=29.0, bound=60) is Verdict.DEAF


def test_d1_a_quiet_but_live_connection_is_kept_alive_by_its_pings(feishu_stub, ws_stub, bot, run_connection):
    # given a connection with no events for two and a half bounds (the SDK's own ping interval is 120 s)
    running = run_connection(LongConnection(bot=bot, silence_seconds=SILENCE))
    ws_stub.wait_connections(1)
    time.sleep(2 * SILENCE + 0.5)
    # then the watchdog's pings were answered: still the first connection, not deaf
    assert running.ended == []
    assert ws_stub.connections_accepted == 1
    running.connection.flush()
    assert FeishuConnection.objects.get(bot=bot).state == "connected"


def test_d1_a_deaf_connection_is_replaced_within_the_bound_and_nothing_is_lost_or_doubled(
    feishu_stub, ws_stub, bot, run_connection
):
    # given a connection that has answered one event
    first = run_connection(LongConnection(bot=bot, silence_seconds=SILENCE))
    ws_stub.wait_connections(1)
    before = ws_stub.push(dm_payload(bot, message_id="om_before"))
    ws_stub.wait_acked([before])
    # when the socket stays open but nothing comes through, while two more events are pushed
    went_silent = time.monotonic()
    ws_stub.go_silent()
    during = [ws_stub.push(dm_payload(bot, message_id=f"om_during_{i}")) for i in range(2)]
    first.thread.join(timeout=SILENCE + 10)
    detected = time.monotonic() - went_silent
    # then the child ends as deaf within the bound, and its row says since when
    assert len(first.ended) == 1 and isinstance(first.ended[0], DeafConnectionError)
    assert detected <= SILENCE + SLACK, detected
    row = FeishuConnection.objects.get(bot=bot)
    assert row.state == "deaf" and row.deaf_since is not None
    # when the supervisor's replacement connects
    second = run_connection(
        LongConnection(bot=bot, silence_seconds=SILENCE, reconnect_reason="replaced: the connection was deaf")
    )
    ws_stub.wait_connections(2)
    ws_stub.wait_acked(during, timeout=15)
    after = ws_stub.push(dm_payload(bot, message_id="om_after"))
    ws_stub.wait_acked([after])
    second.connection.flush()
    # then every event is stored and answered once, and the row tells the story
    stored = sorted(InboundEvent.objects.filter(bot=bot).values_list("message_id", flat=True))
    assert stored == ["om_after", "om_before", "om_during_0", "om_during_1"]
    assert Turn.objects.filter(bot=bot).count() == 4
    reply_targets = [request.path for request in feishu_stub.requests if request.route == "reply"]
    assert len(feishu_stub.sent) == 4 and len(reply_targets) == len(set(reply_targets))
    row = FeishuConnection.objects.get(bot=bot)
    assert (row.state, row.deaf_since, row.reconnects) == ("connected", None, 1)
    assert row.last_reconnect_reason == "replaced: the connection was deaf"
    states = [entry["state"] for entry in reversed(connection_history(bot))]
    assert states[-3:] == ["deaf", "reconnecting", "connected"]


def test_d1_a_connection_the_sdk_gave_up_on_ends_its_child_as_failed(ws_stub, bot, run_connection):
    # given an SDK allowed one reconnect attempt, and an endpoint that refuses the next three lookups
    ws_stub.client_config["ReconnectCount"] = 1
    running = run_connection(LongConnection(bot=bot, silence_seconds=30))
    ws_stub.wait_connections(1)
    ws_stub.refuse_reconnects(3)
    # when the connection drops, the SDK's reconnecting gives up
    ws_stub.drop()
    running.thread.join(timeout=20)
    # then run() ends with the SDK's error (the child exits 1), recorded on the row: never left connected to nothing
    assert len(running.ended) == 1 and "unable to connect" in str(running.ended[0])
    row = FeishuConnection.objects.get(bot=bot)
    assert row.state == "failed" and "gave up" in connection_history(bot)[0]["note"]


def _exits_with(code: int):
    return lambda _pk: [sys.executable, "-c", f"import sys; sys.exit({code})"]


def test_d1_the_supervisor_replaces_a_deaf_child_at_once_and_a_failed_one_after_backoff_forever(bot):
    now = [1000.0]
    deaf = LongConnectionSupervisor(child_command=_exits_with(EXIT_DEAF), clock=lambda: now[0])
    failing = LongConnectionSupervisor(child_command=_exits_with(1), clock=lambda: now[0])
    try:
        for supervisor in (deaf, failing):
            supervisor.reconcile([LongConnectionBot(bot.pk, bot.slug, "a")])
            supervisor.children[bot.pk].process.wait()
        # when the deaf child ends: a new child at once, told why; the row says reconnecting
        deaf.check()
        child = deaf.children[bot.pk]
        assert child.process is not None and child.reason.startswith("replaced: the connection was deaf")
        row = FeishuConnection.objects.get(bot=bot)
        assert (row.state, row.last_reconnect_reason) == ("reconnecting", child.reason)
        # when the failed child ends, again and again: restarted after each backoff, never given up
        for failures in range(1, 9):
            failing.children[bot.pk].process.wait()
            failing.check()
            assert failing.children[bot.pk].process is None
            now[0] += restart_delay_seconds(failures=failures)
            failing.check()
            assert failing.children[bot.pk].process is not None
        assert failing.children[bot.pk].failures == 8
    finally:
        deaf.stop_all()
        failing.stop_all()


def test_d1_the_bot_page_shows_deaf_since_the_last_reconnect_and_the_history(admin_client, bot):
    connection_state_record(bot_pk=bot.pk, state="connected", note="connected")
    connection_state_record(bot_pk=bot.pk, state="deaf", deaf_since=timezone.now(), note="deaf: no frame for 61 s")
    connection_state_record(
        bot_pk=bot.pk,
        state="reconnecting",
        last_reconnect_at=timezone.now(),
        last_reconnect_reason="replaced: the connection was deaf",
        note="replaced: the connection was deaf",
    )

    page = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").content.decode()

    assert "deaf since " in page and "last reconnect " in page and "replaced: the connection was deaf" in page
    history = page[page.index('id="bot-connection-history"') :]
    assert history.index('data-state="reconnecting"') < history.index('data-state="deaf"')
    assert history.index('data-state="deaf"') < history.index('data-state="connected"')
