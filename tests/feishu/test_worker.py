"""F2 through a real Celery worker (REDIS_URL set, PostgreSQL): the same message pushed four times (new event ids,
a webhook "restart" in between) is processed once by the worker: one turn, one delivery. The bot has no Feishu
credentials (F5), so the worker needs no Feishu: its delivery is recorded."""

import time

import pytest

from agents.models import Turn
from feishu.inbound import webhook as feishu_webhook
from feishu.inbound import webhook_bots
from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload
from feishu.models import InboundEvent, OutboundDelivery
from tests.helpers import wait_for

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def test_f2_four_deliveries_one_turn_one_reply_on_a_real_worker(celery_worker, client, make_feishu_bot):
    # given: a bot whose own open_id is known (F6) and has no app secret (F5: replies recorded, not sent)
    bot = make_feishu_bot(feishu_app_secret="", feishu_bot_open_id="ou_worker_bot")
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_worker_once",
        chat_id="oc_worker",
        text="@_user_1 hello worker",
        mentions=[mention_entry(index=1, open_id="ou_worker_bot", name=bot.name)],
    )
    # when: Feishu pushes it four times, under new event ids, across a webhook restart
    statuses = []
    for attempt in range(4):
        payload["header"]["event_id"] = f"evt-{attempt}"
        if attempt == 2:
            feishu_webhook._handlers.clear()
            webhook_bots._bots.clear()
        signed = event_request_build(payload=payload, encrypt_key=bot.feishu_encrypt_key)
        headers = {k: v for k, v in signed.django_headers().items() if k != "HTTP_CONTENT_TYPE"}
        statuses.append(
            client.post(
                f"/feishu/webhook/{bot.slug}/", data=signed.body, content_type="application/json", **headers
            ).status_code
        )
    # then
    assert statuses == [200, 200, 200, 200]
    wait_for(
        lambda: OutboundDelivery.objects.filter(bot=bot, status="recorded").exists(), worker=celery_worker, what="reply"
    )
    time.sleep(1)  # give any (wrong) second processing the chance to show up
    event = InboundEvent.objects.get(bot=bot)
    assert (event.event_id, event.status, event.attempts) == ("evt-0", "done", 1)
    assert Turn.objects.filter(bot=bot).count() == 1
    assert OutboundDelivery.objects.filter(bot=bot).count() == 1
