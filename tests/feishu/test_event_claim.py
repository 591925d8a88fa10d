"""Issue 11: the inbound event's claim is one statement (UPDATE ... RETURNING) and keeps what it guaranteed.

One worker claims an event (two claimers: one wins), a claim older than the takeover age is taken over by the
redelivered task, a finished or freshly claimed event is left alone, and the event's bot comes from the
worker's process cache (a save drops it at once).
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Bot
from feishu.inbound.intake import (
    BOT_CACHE_SECONDS,
    bot_cached_get,
    claim_takeover_seconds,
    inbound_event_claim,
)
from feishu.inbound.signing import message_event_payload
from feishu.models import InboundEvent
from tests.feishu.concurrency import run_against_a_held_transaction

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)


def stored_event(bot, *, message_id: str = "om_1", **fields) -> InboundEvent:
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id=message_id,
        chat_id="oc_group",
        text="hello",
    )
    return InboundEvent.objects.create(
        bot=bot,
        event_id=payload["header"]["event_id"],
        message_id=message_id,
        event_type="im.message.receive_v1",
        payload=payload,
        **fields,
    )


def test_the_claim_returns_the_claimed_row_in_one_statement(make_feishu_bot):
    # given: a stored event whose bot this worker has read before
    bot = make_feishu_bot()
    event = stored_event(bot)
    bot_cached_get(bot_pk=bot.pk)
    # when
    with CaptureQueriesContext(connection) as captured:
        claimed = inbound_event_claim(event_pk=event.pk, now=NOW)
    # then: one UPDATE ... RETURNING, its columns converted like a read (the payload a dict, datetimes aware)
    assert len(captured) == 1, [query["sql"] for query in captured]
    assert "RETURNING" in captured[0]["sql"]
    assert (claimed.pk, claimed.status, claimed.attempts, claimed.claimed_at) == (
        event.pk,
        InboundEvent.Status.PROCESSING,
        1,
        NOW,
    )
    assert (claimed.payload, claimed.message_id, claimed.received_at) == (
        event.payload,
        "om_1",
        event.received_at,
    )
    assert (claimed.bot.pk, claimed.bot.slug) == (bot.pk, bot.slug)
    stored = InboundEvent.objects.get(pk=event.pk)
    assert (stored.status, stored.attempts, stored.claimed_at) == (InboundEvent.Status.PROCESSING, 1, NOW)


@pytest.mark.parametrize("status", [InboundEvent.Status.DONE, InboundEvent.Status.IGNORED, InboundEvent.Status.FAILED])
def test_a_finished_event_is_not_claimed(make_feishu_bot, status):
    event = stored_event(make_feishu_bot(), status=status, attempts=1)
    assert inbound_event_claim(event_pk=event.pk, now=NOW) is None
    stored = InboundEvent.objects.get(pk=event.pk)
    assert (stored.status, stored.attempts) == (status, 1)


def test_a_claim_is_taken_over_only_once_it_is_older_than_the_takeover_age(make_feishu_bot):
    # given: an event claimed by a worker, claimed again at once by a second delivery of its task
    bot = make_feishu_bot()
    event = stored_event(bot)
    assert inbound_event_claim(event_pk=event.pk, now=NOW) is not None
    assert inbound_event_claim(event_pk=event.pk, now=NOW + timedelta(seconds=10)) is None
    # when: the first worker died and the broker redelivers after the takeover age
    later = NOW + timedelta(seconds=claim_takeover_seconds() + 1)
    taken_over = inbound_event_claim(event_pk=event.pk, now=later)
    # then: the redelivery has it, as the second attempt
    assert (taken_over.status, taken_over.attempts, taken_over.claimed_at) == (InboundEvent.Status.PROCESSING, 2, later)
    stored = InboundEvent.objects.get(pk=event.pk)
    assert (stored.attempts, stored.claimed_at) == (2, later)


def test_the_bot_is_read_once_per_cache_period_and_a_save_here_drops_it(make_feishu_bot):
    bot = make_feishu_bot()
    with CaptureQueriesContext(connection) as first:
        cached = bot_cached_get(bot_pk=bot.pk, now=0.0)
    with CaptureQueriesContext(connection) as again:
        copy = bot_cached_get(bot_pk=bot.pk, now=BOT_CACHE_SECONDS - 1)
    assert (len(first), len(again), cached.pk, copy.pk) == (1, 0, bot.pk, bot.pk)
    # each caller has its own copy: what one event's processing sets on it is not the next event's bot
    copy.feishu_bot_open_id = "ou_changed_in_memory"
    assert bot_cached_get(bot_pk=bot.pk, now=1.0).feishu_bot_open_id == bot.feishu_bot_open_id
    # a save in this process is seen at once; a change elsewhere once the entry expires
    bot.name = "Renamed"
    bot.save()
    assert bot_cached_get(bot_pk=bot.pk, now=2.0).name == "Renamed"
    Bot.objects.filter(pk=bot.pk).update(name="Elsewhere")
    assert bot_cached_get(bot_pk=bot.pk, now=3.0).name == "Renamed"
    assert bot_cached_get(bot_pk=bot.pk, now=2.0 + BOT_CACHE_SECONDS + 1).name == "Elsewhere"


@pytest.mark.django_db(transaction=True)
def test_two_claimers_of_one_event_one_wins_on_postgresql(make_feishu_bot):
    if connection.vendor != "postgresql":
        pytest.skip("row locks between two connections: PostgreSQL")
    # given: an event, a worker's claim in flight (its transaction not yet committed)
    bot = make_feishu_bot()
    event = stored_event(bot)
    # when: a second delivery claims the same event meanwhile
    first, second = run_against_a_held_transaction(
        hold=lambda: inbound_event_claim(event_pk=event.pk),
        contend=lambda: inbound_event_claim(event_pk=event.pk),
    )
    # then: the first claimer has it, the second waited for its row and found it claimed
    assert first is not None and first.pk == event.pk
    assert second is None
    stored = InboundEvent.objects.get(pk=event.pk)
    assert (stored.status, stored.attempts) == (InboundEvent.Status.PROCESSING, 1)
