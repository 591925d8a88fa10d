"""G6: Feishu intake over the long connection, through the real `lark_oapi.ws.Client` against the local stub.

The connection runs in a thread of the test process (as in its child process, one per process); its store runs
in the connection's DB thread, so these tests use committed transactions (transactional_db).
"""

import secrets
import time

import pytest

from agents.models import Bot, Turn
from feishu.inbound.longconn import LongConnection
from feishu.inbound.signing import message_event_payload
from feishu.inbound.supervisor import (
    LongConnectionBot,
    LongConnectionSupervisor,
    long_connection_bots_list,
    restart_delay_seconds,
)
from feishu.models import FeishuConnection, InboundEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def dm_payload(bot: Bot, *, message_id: str | None = None, text: str = "hello over the socket") -> dict:
    return message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id=message_id or "om_" + secrets.token_hex(8),
        chat_id="oc_dm_" + bot.slug,
        chat_type="p2p",
        text=text,
        sender_open_id="ou_alice",
    )


def test_g6_an_event_pushed_over_the_connection_is_one_inbound_event_and_one_reply(
    feishu_stub, ws_stub, long_connection_bot, connect
):
    # given
    bot = long_connection_bot
    connection = connect(bot)
    payload = dm_payload(bot, message_id="om_socket_1")
    # when
    frame_id = ws_stub.push(payload)
    ws_stub.wait_acked([frame_id])
    connection.flush()
    # then: stored once, with the webhook's shape (no verification token), processed, answered once
    event = InboundEvent.objects.get()
    assert (event.bot_id, event.message_id, event.event_type, event.status) == (
        bot.pk,
        "om_socket_1",
        "im.message.receive_v1",
        "done",
    )
    assert event.event_id == payload["header"]["event_id"]
    assert "token" not in event.payload["header"]
    assert ws_stub.events[frame_id].ack_codes == [200]
    assert Turn.objects.filter(bot=bot).count() == 1
    replies = [request for request in feishu_stub.requests if request.route in ("reply", "create")]
    assert len(replies) == 1
    assert len(feishu_stub.sent) == 1
    state = FeishuConnection.objects.get(bot=bot)
    assert (state.state, state.events_received, state.reconnects, state.last_error) == ("connected", 1, 0, "")
    assert state.connected_since is not None and state.last_event_at is not None
    assert ws_stub.endpoint_requests == [{"path": "/callback/ws/endpoint", "app_id": bot.feishu_app_id}]


def test_g6_a_redelivered_event_is_acknowledged_and_answered_once(feishu_stub, ws_stub, long_connection_bot, connect):
    # given: an event stored and answered
    bot = long_connection_bot
    connect(bot)
    frame_id = ws_stub.push(dm_payload(bot, message_id="om_twice"))
    ws_stub.wait_acked([frame_id])
    # when: Feishu pushes it again (it did not see the ack), and a copy under a new event_id
    ws_stub.redeliver(frame_id)
    copy = dm_payload(bot, message_id="om_twice")
    second = ws_stub.push(copy)
    ws_stub.wait_acked([second])
    deadline = time.monotonic() + 10
    while len(ws_stub.events[frame_id].ack_codes) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    # then: both acknowledged with 200, nothing stored or sent twice
    assert ws_stub.events[frame_id].ack_codes == [200, 200]
    assert InboundEvent.objects.filter(bot=bot).count() == 1
    assert Turn.objects.filter(bot=bot).count() == 1
    assert len(feishu_stub.sent) == 1


def test_g6_a_dropped_connection_reconnects_and_receives_again(feishu_stub, ws_stub, long_connection_bot, connect):
    # given
    bot = long_connection_bot
    connection = connect(bot)
    # when: the network drops the socket, and an event is pushed while the client is away
    ws_stub.drop()
    frame_id = ws_stub.push(dm_payload(bot, message_id="om_after_drop"))
    ws_stub.wait_connections(2, timeout=15)
    ws_stub.wait_acked([frame_id], timeout=15)
    connection.flush()
    # then: a second endpoint lookup and connection, the event stored once, the reconnect recorded
    assert ws_stub.connections_accepted == 2
    assert len(ws_stub.endpoint_requests) == 2
    assert list(InboundEvent.objects.values_list("message_id", flat=True)) == ["om_after_drop"]
    assert len(feishu_stub.sent) == 1
    state = FeishuConnection.objects.get(bot=bot)
    assert (state.state, state.reconnects, state.events_received) == ("connected", 1, 1)


def test_g6_hundred_events_with_two_drops_lose_none_and_answer_none_twice(
    feishu_stub, ws_stub, long_connection_bot, connect
):
    # given
    bot = long_connection_bot
    connect(bot)
    message_ids = [f"om_burst_{index:03d}" for index in range(100)]
    # One generous budget for the whole burst, shared by every wait (a bound on a hang, not a speed assertion).
    # The SDK handles each event synchronously on its event loop, so it notices a drop only after it has stored
    # and acknowledged every frame already received: the reconnect waits for that backlog, which under load
    # takes far longer than the reconnect interval.
    deadline = time.monotonic() + 90

    def remaining() -> float:
        return max(deadline - time.monotonic(), 0.0)

    # when: 100 events, the connection dropped after the 33rd and the 66th push (acks possibly in flight)
    frame_ids = []
    for index, message_id in enumerate(message_ids):
        frame_ids.append(ws_stub.push(dm_payload(bot, message_id=message_id, text=f"message {index}")))
        if index in (32, 65):
            ws_stub.wait_connections(1 if index == 32 else 2, timeout=remaining())  # a drop of a live connection
            ws_stub.drop()
    ws_stub.wait_acked(frame_ids, timeout=remaining())
    # then: 0 lost, 0 answered twice, within the budget (each wait raises TimeoutError past it)
    assert ws_stub.connections_accepted == 3
    stored = sorted(InboundEvent.objects.filter(bot=bot).values_list("message_id", flat=True))
    assert stored == message_ids
    assert Turn.objects.filter(bot=bot).count() == 100
    assert len(feishu_stub.sent) == 100
    reply_targets = [request.path for request in feishu_stub.requests if request.route == "reply"]
    assert len(reply_targets) == len(set(reply_targets))


def test_g6_wrong_app_secret_fails_without_retrying_and_records_why(ws_stub, make_feishu_bot):
    # given: the endpoint refuses the app's credentials
    bot = make_feishu_bot(feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION)
    ws_stub.app_secrets[bot.feishu_app_id] = "another-secret"
    connection = LongConnection(bot=bot)
    # when / then: run() raises (the child exits and the supervisor backs off); nothing was stored
    with pytest.raises(Exception, match="app_secret invalid"):
        connection.run()
    state = FeishuConnection.objects.get(bot=bot)
    assert state.state == "failed"
    assert "app_secret invalid" in state.last_error
    assert bot.feishu_app_secret not in state.last_error
    assert ws_stub.connections_accepted == 0
    assert InboundEvent.objects.count() == 0


def test_g6_only_enabled_long_connection_bots_with_an_app_are_supervised(make_feishu_bot):
    # given
    wanted = make_feishu_bot(slug="socket", feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION)
    make_feishu_bot(slug="hook")  # webhook mode
    make_feishu_bot(slug="off", feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION, is_enabled=False)
    make_feishu_bot(slug="keyless", feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION, feishu_app_secret="")
    # when
    bots = long_connection_bots_list()
    # then
    assert [bot.slug for bot in bots] == ["socket"]
    assert bots[0].pk == wanted.pk
    assert long_connection_bots_list(slugs=["hook"]) == []


def test_g6_a_rekeyed_bot_gets_a_new_fingerprint(make_feishu_bot):
    # given
    bot = make_feishu_bot(feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION)
    before = long_connection_bots_list()[0].fingerprint
    # when
    bot.feishu_app_secret = "rotated-secret"
    bot.save()
    # then
    after = long_connection_bots_list()[0].fingerprint
    assert before != after
    assert "rotated-secret" not in after


def test_g6_restart_backoff_doubles_up_to_a_minute():
    assert [restart_delay_seconds(failures=n) for n in (1, 2, 3, 6, 7, 20)] == [1.0, 2.0, 4.0, 32.0, 60.0, 60.0]


def _sleeper(_: int) -> list[str]:
    return ["sleep", "600"]


def test_g6_supervisor_starts_stops_and_restarts_children_as_bots_change():
    # given: a supervisor whose children are plain processes, and a fake clock
    now = [1000.0]
    supervisor = LongConnectionSupervisor(child_command=_sleeper, clock=lambda: now[0])
    one, two = LongConnectionBot(1, "one", "a"), LongConnectionBot(2, "two", "b")
    try:
        # when: two bots appear
        supervisor.reconcile([one, two])
        first_pids = {pk: child.process.pid for pk, child in supervisor.children.items()}
        # then: one child each
        assert sorted(first_pids) == [1, 2]
        # when: bot two is re-keyed and bot one disabled
        supervisor.reconcile([LongConnectionBot(2, "two", "rotated")])
        # then: one is stopped, two restarted under a new process
        assert list(supervisor.children) == [2]
        assert supervisor.children[2].process.pid != first_pids[2]
        # when: the child dies
        supervisor.children[2].process.kill()
        supervisor.children[2].process.wait()
        supervisor.check()
        # then: not restarted before its backoff, restarted after
        assert supervisor.children[2].process is None
        now[0] += restart_delay_seconds(failures=1)
        supervisor.check()
        assert supervisor.children[2].process is not None
        assert supervisor.children[2].process.poll() is None
    finally:
        processes = [child.process for child in supervisor.children.values() if child.process is not None]
        supervisor.stop_all()
    # then: stop_all ends every child
    assert supervisor.children == {}
    assert all(process.poll() is not None for process in processes)


def test_g6_a_store_slower_than_the_ack_window_is_redelivered_and_kept_once(
    feishu_stub, ws_stub, long_connection_bot, connect, monkeypatch
):
    # given: the first store takes longer than the processor waits (a locked database, say)
    from feishu.inbound import longconn

    real_store = longconn.captured_event_store
    calls = []

    def slow_first_store(**kwargs):
        calls.append(kwargs["event"]["event"]["message"]["message_id"])
        if len(calls) == 1:
            # the first processor already waits with 0.3 s; redeliveries wait long enough for this machine
            monkeypatch.setattr(longconn, "STORE_TIMEOUT_SECONDS", 60.0)
            time.sleep(0.6)
        return real_store(**kwargs)

    monkeypatch.setattr(longconn, "STORE_TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(longconn, "captured_event_store", slow_first_store)
    bot = long_connection_bot
    connection = connect(bot)
    # when
    frame_id = ws_stub.push(dm_payload(bot, message_id="om_slow_store"))
    ws_stub.wait_acked([frame_id], timeout=15)
    connection.flush()
    # then: acked 500 (Feishu redelivers), then 200; stored once, answered once
    assert ws_stub.events[frame_id].ack_codes == [500, 200]
    assert calls == ["om_slow_store", "om_slow_store"]
    assert InboundEvent.objects.filter(bot=bot).count() == 1
    assert Turn.objects.filter(bot=bot).count() == 1
    assert len(feishu_stub.sent) == 1
