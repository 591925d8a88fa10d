"""Issue 11: a discuss message opens or extends its topic's pending wake in one statement (INSERT ... ON CONFLICT
... DO UPDATE ... RETURNING on the partial unique index of pending wakes), with the debounce rules of P10 intact.

The wake is never lost: the first message opens it and queues its fire task; every later one extends the same
row (appended once, due_at moved forward but never past the deadline, never back) and queues nothing; a wake
no longer pending (running, done) is not extended: the next message opens a new one. Two workers scheduling
one topic at once end with one wake holding both messages. The routed event's "done" rides in the same statement
on PostgreSQL (a data-modifying CTE), so an un-addressed discuss message costs 3 statements there.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from feishu.discuss import wake as discuss
from feishu.discuss.wake import discuss_wake_schedule, discuss_wake_upsert
from feishu.inbound.intake import EventFinish
from feishu.inbound.signing import message_event_payload
from feishu.models import DiscussWake, InboundEvent
from tests.feishu.concurrency import run_against_a_held_transaction

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
CHAT, ROOT = "oc_discuss", "om_root"
INITIAL, MAXIMUM = timedelta(seconds=1), timedelta(seconds=30)


@pytest.fixture
def bot(make_feishu_bot):
    return make_feishu_bot(probe_debounce_initial_ms=1000, probe_debounce_max_ms=30000)


@pytest.fixture
def fire_enqueued(mocker):
    return mocker.patch.object(discuss, "discuss_wake_fire_enqueue")


def schedule(bot, message_id: str, at: datetime) -> DiscussWake:
    return discuss_wake_schedule(bot=bot, chat_id=CHAT, root_msg_id=ROOT, message_id=message_id, now=at)


def upsert(bot, message_id: str, at: datetime) -> DiscussWake:
    return discuss_wake_upsert(
        bot=bot,
        chat_id=CHAT,
        root_msg_id=ROOT,
        message_id=message_id,
        due_at=at + INITIAL,
        deadline_at=at + MAXIMUM,
        first_message_at=at,
    )


def test_the_first_message_opens_the_wake_in_one_statement_and_queues_its_fire(bot, fire_enqueued):
    # when
    with CaptureQueriesContext(connection) as captured:
        wake = upsert(bot, "om_1", T0)
    # then: one INSERT ... RETURNING, the row as stored
    assert len(captured) == 1, [query["sql"] for query in captured]
    assert (wake.status, wake.message_ids, wake.last_message_id) == (DiscussWake.Status.PENDING, ["om_1"], "om_1")
    assert (wake.first_message_at, wake.due_at, wake.deadline_at, wake.attempts) == (T0, T0 + INITIAL, T0 + MAXIMUM, 0)
    stored = DiscussWake.objects.get()
    assert (stored.pk, stored.message_ids, stored.due_at) == (wake.pk, ["om_1"], T0 + INITIAL)
    # and through the schedule: its fire task queued for the due time, once
    schedule(bot, "om_2", T0 + timedelta(minutes=5))  # the same open wake: extended
    fire_enqueued.assert_not_called()
    DiscussWake.objects.all().delete()
    opened = schedule(bot, "om_3", T0)
    fire_enqueued.assert_called_once_with(wake_id=opened.pk, eta=T0 + INITIAL)


def test_a_later_message_extends_the_same_wake_in_one_statement_and_queues_nothing(bot, fire_enqueued):
    # given
    opened = schedule(bot, "om_1", T0)
    fire_enqueued.reset_mock()
    # when
    with CaptureQueriesContext(connection) as captured:
        wake = upsert(bot, "om_2", T0 + timedelta(milliseconds=800))
    schedule(bot, "om_3", T0 + timedelta(milliseconds=900))
    # then
    assert len(captured) == 1, [query["sql"] for query in captured]
    assert wake.pk == opened.pk
    assert (wake.message_ids, wake.last_message_id) == (["om_1", "om_2"], "om_2")
    assert wake.due_at == T0 + timedelta(milliseconds=1800)
    stored = DiscussWake.objects.get()
    assert (stored.message_ids, stored.last_message_id) == (["om_1", "om_2", "om_3"], "om_3")
    assert (stored.due_at, stored.deadline_at, stored.first_message_at) == (
        T0 + timedelta(milliseconds=1900),
        T0 + MAXIMUM,
        T0,
    )
    fire_enqueued.assert_not_called()


def test_the_due_time_never_moves_back_nor_past_the_deadline_and_a_message_counts_once(bot, fire_enqueued):
    schedule(bot, "om_1", T0)
    schedule(bot, "om_2", T0 + timedelta(seconds=5))
    # a message seen with an older clock (another worker's) does not pull the due time back
    assert schedule(bot, "om_3", T0 + timedelta(seconds=1)).due_at == T0 + timedelta(seconds=6)
    # near the deadline the due time stops at it
    assert schedule(bot, "om_4", T0 + timedelta(seconds=29, milliseconds=500)).due_at == T0 + MAXIMUM
    # the same message again (an admin's reprocess) is not appended twice
    wake = schedule(bot, "om_4", T0 + timedelta(seconds=29, milliseconds=600))
    assert wake.message_ids == ["om_1", "om_2", "om_3", "om_4"]
    assert DiscussWake.objects.count() == 1


@pytest.mark.parametrize("status", [DiscussWake.Status.RUNNING, DiscussWake.Status.DONE, DiscussWake.Status.FAILED])
def test_a_wake_no_longer_pending_is_not_extended_the_next_message_opens_a_new_one(bot, fire_enqueued, status):
    # given: the topic's wake is being judged (or ended)
    first = schedule(bot, "om_1", T0)
    DiscussWake.objects.filter(pk=first.pk).update(status=status)
    fire_enqueued.reset_mock()
    # when
    second = schedule(bot, "om_2", T0 + timedelta(seconds=2))
    # then: a new wake for the new message, its fire queued; the first untouched
    assert second.pk != first.pk
    assert (second.status, second.message_ids, second.due_at) == (
        DiscussWake.Status.PENDING,
        ["om_2"],
        T0 + timedelta(seconds=3),
    )
    fire_enqueued.assert_called_once_with(wake_id=second.pk, eta=second.due_at)
    untouched = DiscussWake.objects.get(pk=first.pk)
    assert (untouched.status, untouched.message_ids) == (status, ["om_1"])


def test_other_topics_and_bots_have_their_own_wakes(bot, make_feishu_bot, fire_enqueued):
    other_bot = make_feishu_bot()
    a = schedule(bot, "om_1", T0)
    b = discuss_wake_schedule(bot=bot, chat_id=CHAT, root_msg_id="om_other_root", message_id="om_2", now=T0)
    c = discuss_wake_schedule(bot=other_bot, chat_id=CHAT, root_msg_id=ROOT, message_id="om_1", now=T0)
    assert len({a.pk, b.pk, c.pk}) == 3
    assert fire_enqueued.call_count == 3


@pytest.mark.django_db(transaction=True)
def test_two_workers_scheduling_one_topic_at_once_make_one_wake_on_postgresql(bot, fire_enqueued):
    if connection.vendor != "postgresql":
        pytest.skip("two connections on one unique index: PostgreSQL")
    # when: a worker opens the wake (its transaction not yet committed) and a second schedules the same topic
    first, second = run_against_a_held_transaction(
        hold=lambda: schedule(bot, "om_1", T0),
        contend=lambda: schedule(bot, "om_2", T0 + timedelta(milliseconds=300)),
    )
    # then: the second waited for the first's row and extended it; one fire task, for the opened wake
    assert second.pk == first.pk
    wake = DiscussWake.objects.get()
    assert (wake.message_ids, wake.last_message_id, wake.due_at) == (
        ["om_1", "om_2"],
        "om_2",
        T0 + timedelta(milliseconds=1300),
    )
    fire_enqueued.assert_called_once_with(wake_id=first.pk, eta=T0 + INITIAL)


@pytest.mark.parametrize("already_open", [False, True], ids=["opens", "extends"])
def test_the_events_finish_rides_in_the_wake_statement(bot, fire_enqueued, already_open):
    # given: a stored event being routed (claimed), its payload annotated on the way, the topic's wake open or not
    if already_open:
        schedule(bot, "om_0", T0)
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_1",
        chat_id=CHAT,
        text="hi",
    )
    event = InboundEvent.objects.create(
        bot=bot, event_id="ev_1", message_id="om_1", event_type="im.message.receive_v1", payload=payload,
        status=InboundEvent.Status.PROCESSING, attempts=1,
    )  # fmt: skip
    annotated = {**payload, "hub": {"chat_is_topic": True}}
    finish = EventFinish(event=event, payload=annotated)
    # when
    with CaptureQueriesContext(connection) as captured:
        wake = discuss_wake_upsert(
            bot=bot,
            chat_id=CHAT,
            root_msg_id=ROOT,
            message_id="om_1",
            due_at=T0 + INITIAL,
            deadline_at=T0 + MAXIMUM,
            first_message_at=T0,
            carried_write=finish.done_statement(),
        )
    # then: one statement on PostgreSQL (a data-modifying CTE), two on SQLite (no DML in WITH), both rows written
    assert len(captured) == (1 if connection.vendor == "postgresql" else 2), [query["sql"] for query in captured]
    assert wake.message_ids == (["om_0", "om_1"] if already_open else ["om_1"])
    stored = InboundEvent.objects.get(pk=event.pk)
    assert (stored.status, stored.error, stored.attempts, stored.payload) == ("done", "", 1, annotated)
    assert stored.processed_at is not None
