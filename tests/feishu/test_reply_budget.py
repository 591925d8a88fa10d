"""R4 through the whole turn: three bots answering ten questions each in one group at once (three worker threads,
each running the one turn runner) never post more than 5 messages per second at Feishu, and every answer arrives.

Threads need PostgreSQL: on SQLite the suite's shared in-memory database locks whole tables across connections.
"""

import threading

import pytest
from django.db import connection

from agents.models import Turn
from agents.services.turns.runner import turn_run

pytestmark = pytest.mark.django_db(transaction=True)

BOTS = 3
REPLIES_PER_BOT = 10
CHAT = "oc_busy_group"


def test_r4_three_bots_ten_replies_each_into_one_chat_never_exceed_5_sends_per_second(feishu, make_feishu_bot, mocker):
    if connection.vendor != "postgresql":
        pytest.skip("three worker threads need PostgreSQL (SQLite's shared in-memory test database locks tables)")
    # given: 30 questions to three bots in one group; the turns wait to be run by three workers at once
    mocker.patch("feishu.channel.turn_channel.turn_enqueue")
    bots = [make_feishu_bot() for _ in range(BOTS)]
    for bot in bots:
        for index in range(REPLIES_PER_BOT):
            feishu.say(bot, text=f"question {index}", mention=[bot], chat_id=CHAT, message_id=f"om_{bot.pk}_{index}")
    errors: list[BaseException] = []

    def worker(bot) -> None:
        try:
            for turn_id in Turn.objects.filter(bot=bot).order_by("id").values_list("id", flat=True):
                turn_run(turn_id=turn_id)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(bot,)) for bot in bots]
    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    # then: every answer delivered as one card reply, none refused, never more than 5 per second in the chat
    assert errors == []
    assert list(Turn.objects.values_list("status", flat=True).distinct()) == ["delivered"]
    replies = feishu.stub.requests_to("reply")
    assert len(feishu.stub.accepted("reply")) == BOTS * REPLIES_PER_BOT
    assert [r for r in replies if r.status != 200] == []
    assert feishu.stub.max_per_second(replies) <= 5
    # and the reactions and card updates, which took from the same budget, were never refused either
    assert [r for r in feishu.stub.requests if r.status == 429] == []
