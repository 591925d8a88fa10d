"""Bridge notices and the bot-info lookup call Feishu outside any database transaction, exactly once (F3, F6).

These tests use a transactional database (no wrapping test transaction), so `in_atomic_block` at the moment
of each Feishu call says whether the bridge itself held a transaction open across the HTTP call.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents.models import Turn
from feishu.channel.turn_channel import QUOTED_READ_FAILED_TEXT
from feishu.inbound.messages import NEW_SESSION_TEXT, RETIRED_SESSION_TEXT
from feishu.models import InboundEvent, OutboundDelivery
from feishu.outbound import client as feishu_client
from feishu.tasks import inbound_events_sweep
from tests.feishu.commands_helpers import full_help
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def feishu_calls(mocker) -> list[tuple[str, bool]]:
    """(operation, inside a transaction?) of every Feishu call the bridge makes."""
    seen: list[tuple[str, bool]] = []
    real = feishu_client.feishu_call

    def spy(**kwargs):
        seen.append((kwargs["operation"], connection.in_atomic_block))
        return real(**kwargs)

    mocker.patch.object(feishu_client, "feishu_call", side_effect=spy)
    return seen


def _sent_texts(stub) -> list[str]:
    return stub.sent_texts()


def test_f6_help_notice_and_bot_info_lookup_run_outside_transactions(feishu, make_feishu_bot, feishu_calls):
    # given: a bot whose own open_id is not known yet
    bot = make_feishu_bot()
    # when
    response, _ = feishu.say(bot, text="/help", mention=[bot])
    # then: bot/v3/info once, chat.get once (G1), the help reply once, none inside a transaction
    assert response.status_code == 200
    assert feishu_calls == [("bot.info", False), ("chat.get", False), ("message.reply", False)]
    assert _sent_texts(feishu.stub) == [full_help(bot)]
    assert InboundEvent.objects.get().status == InboundEvent.Status.DONE


def test_c14_new_and_retired_session_notices_run_outside_transactions(feishu, make_feishu_bot, feishu_calls):
    bot = make_feishu_bot(feishu_bot_open_id="")
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    feishu.say(bot, text="first question", mention=[bot], message_id="om_root")
    topic = {"root_id": "om_root", "thread_id": "omt_1", "parent_id": "om_root"}
    feishu.say(bot, text="/new", mention=[bot], **topic)
    feishu.say(bot, text="second question", mention=[bot], **topic)

    assert _sent_texts(feishu.stub)[1:] == [NEW_SESSION_TEXT, RETIRED_SESSION_TEXT]
    assert [in_transaction for _, in_transaction in feishu_calls] == [False] * len(feishu_calls)
    assert Turn.objects.count() == 1


def test_c7_quoted_read_failure_notice_runs_outside_transactions(feishu, make_feishu_bot, feishu_calls):
    bot = make_feishu_bot()  # the stub knows no om_gone: the read fails (230110)

    feishu.say(bot, text="why?", mention=[bot], parent_id="om_gone", message_id="om_why")

    assert _sent_texts(feishu.stub) == [QUOTED_READ_FAILED_TEXT]
    assert ("message.get", False) in feishu_calls
    assert [in_transaction for _, in_transaction in feishu_calls] == [False] * len(feishu_calls)


def test_f3_a_refused_notice_is_kept_and_sent_once_by_the_sweeper(feishu, make_feishu_bot):
    # given: Feishu refuses the help reply once (a server error: feishu_call does not retry it in place)
    bot = make_feishu_bot()
    feishu.stub.fail_next("reply", status=500, code=1, msg="internal")
    # when
    response, _ = feishu.say(bot, text="/help", mention=[bot])
    # then: the event is processed (not retried), the notice row is kept as failed, nothing was posted
    assert response.status_code == 200
    assert InboundEvent.objects.get().status == InboundEvent.Status.DONE
    row = OutboundDelivery.objects.get()
    assert (row.status, row.turn_id, row.attempts) == ("failed", None, 1)
    assert feishu.stub.sent == []
    # when: the beat sweeper runs later, twice
    OutboundDelivery.objects.update(created_at=timezone.now() - timedelta(minutes=5))
    first, second = inbound_events_sweep.delay().get(), inbound_events_sweep.delay().get()
    # then: sent once, with the row's fixed uuid
    assert (first, second) == (1, 0)
    assert _sent_texts(feishu.stub) == [full_help(bot)]
    refused, sent = feishu.stub.requests_to("reply")
    assert (refused.body["uuid"], sent.body["uuid"]) == (row.uuid, row.uuid)
    assert OutboundDelivery.objects.get().status == "sent"


def test_f3_a_notice_feishu_keeps_refusing_is_retried_a_bounded_number_of_times(feishu, make_feishu_bot):
    from feishu.outbound.delivery import NOTICE_GIVE_UP_AFTER_SECONDS, NOTICE_MAX_ATTEMPTS, notices_sweep

    # given: the bot was removed from the chat (a permanent refusal)
    bot = make_feishu_bot()
    feishu.stub.fail_next("reply", status=400, code=230002, msg="Bot is not in the chat", times=100)
    feishu.say(bot, text="/help", mention=[bot])
    row = OutboundDelivery.objects.get()
    later = timezone.now() + timedelta(minutes=5)
    # when: the sweeper runs more often than the cap
    swept = [notices_sweep(now=later) for _ in range(NOTICE_MAX_ATTEMPTS + 2)]
    # then: NOTICE_MAX_ATTEMPTS sends in all, then the row stays failed; an expired notice is never retried
    assert swept == [[row.pk]] * (NOTICE_MAX_ATTEMPTS - 1) + [[], [], []]
    row.refresh_from_db()
    assert (row.status, row.attempts, row.error) == ("failed", NOTICE_MAX_ATTEMPTS, "230002: Bot is not in the chat")
    assert len(feishu.stub.requests_to("reply")) == NOTICE_MAX_ATTEMPTS
    OutboundDelivery.objects.update(attempts=0)
    expired = timezone.now() + timedelta(seconds=NOTICE_GIVE_UP_AFTER_SECONDS + 1)
    assert notices_sweep(now=expired) == []
