"""Issue 30, finding 9: the webhook checks the event's app, keeps one event per event_id, and tells no one
which slugs exist.

Through the real path: a signed, encrypted event posted to the webhook, lark-oapi verifying it, the (eager)
worker answering through the Feishu stub.
"""

import logging

import pytest

from agents.models import Turn
from feishu.inbound.signing import message_event_payload
from feishu.models import InboundEvent
from tests.feishu.conftest import bot_open_id, fixture_payload

pytestmark = pytest.mark.django_db

NO_WEBHOOK = {"message": "There is no Feishu webhook at this address.", "extra": {}}


def _dm(bot, *, app_id: str, message_id: str, text: str, event_id: str, chat_id: str = "oc_dm") -> dict:
    return message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=app_id,
        message_id=message_id,
        chat_id=chat_id,
        text=text,
        chat_type="p2p",
        event_id=event_id,
    )


def _records(caplog, level: int) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= level and record.name.startswith("feishu")]


def test_i30_9_an_event_signed_by_a_but_naming_bs_app_is_acknowledged_and_ignored(feishu, make_feishu_bot, caplog):
    # given: A's keys sign an event that carries B's app id and B's chat
    bot_a, bot_b = make_feishu_bot(), make_feishu_bot()
    payload = _dm(bot_a, app_id=bot_b.feishu_app_id, message_id="om_x1", text="hi", event_id="ev_x1", chat_id="oc_b")
    caplog.set_level(logging.INFO)
    # when
    response = feishu.post(bot_a, payload)
    # then: Feishu's 200-and-ignore, nothing stored, nothing answered, one log line naming the foreign app
    assert (response.status_code, response.json()) == (200, {"msg": "ignored"})
    assert (InboundEvent.objects.count(), Turn.objects.count()) == (0, 0)
    assert feishu.stub.sent_texts() == []
    [line] = _records(caplog, logging.WARNING)
    assert line.getMessage() == "feishu event ignored: its app_id is not the bot's"
    assert (line.bot, line.event_app_id) == (bot_a.slug, bot_b.feishu_app_id)


def test_i30_9_the_same_event_with_the_bots_own_app_id_is_answered(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    payload = _dm(bot, app_id=bot.feishu_app_id, message_id="om_x2", text="hi", event_id="ev_x2")

    response = feishu.post(bot, payload)

    assert (response.status_code, response.json()) == (200, {"msg": "success"})
    assert list(InboundEvent.objects.values_list("message_id", "status")) == [("om_x2", "done")]
    assert Turn.objects.filter(bot=bot).count() == 1


def test_i30_9_a_second_message_under_a_seen_event_id_is_ignored_and_logged(feishu, make_feishu_bot, caplog):
    # given: one DM answered
    bot = make_feishu_bot()
    first = _dm(bot, app_id=bot.feishu_app_id, message_id="om_first", text="first", event_id="ev_same")
    assert feishu.post(bot, first).status_code == 200
    sent_before = feishu.stub.sent_texts()
    assert len(sent_before) == 1
    caplog.set_level(logging.INFO)
    caplog.clear()
    # when: a different message arrives under the same event_id
    second = _dm(bot, app_id=bot.feishu_app_id, message_id="om_second", text="second", event_id="ev_same")
    response = feishu.post(bot, second)
    # then: 200 (no retry), nothing stored for it, no second turn or reply, one warning
    assert response.status_code == 200
    assert list(InboundEvent.objects.values_list("message_id", flat=True)) == ["om_first"]
    assert Turn.objects.filter(bot=bot).count() == 1
    assert feishu.stub.sent_texts() == sent_before
    [line] = _records(caplog, logging.WARNING)
    assert line.getMessage() == "feishu event ignored: its event_id was seen with different content"
    assert (line.event_id, line.message_id, line.first_message_id) == ("ev_same", "om_second", "om_first")


def test_i30_9_the_same_message_under_the_same_event_id_is_the_usual_dedupe(feishu, make_feishu_bot, caplog):
    bot = make_feishu_bot()
    payload = _dm(bot, app_id=bot.feishu_app_id, message_id="om_retry", text="hello", event_id="ev_retry")
    assert feishu.post(bot, payload).status_code == 200
    caplog.set_level(logging.INFO)
    caplog.clear()

    retry = feishu.post(bot, payload)  # Feishu's retry: the same bytes again

    assert (retry.status_code, retry.json()) == (200, {"msg": "success"})
    assert InboundEvent.objects.count() == 1
    assert Turn.objects.filter(bot=bot).count() == 1
    assert _records(caplog, logging.WARNING) == []
    assert [r.getMessage() for r in _records(caplog, logging.INFO)].count("feishu duplicate event") == 1


def test_i30_9_a_retry_of_a_processed_group_message_is_the_usual_dedupe_not_a_reused_event_id(
    feishu, make_feishu_bot, caplog
):
    # given: a group message, processed (routing annotates its stored payload with the chat's mode)
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    feishu.post(bot, payload)
    assert InboundEvent.objects.get().status == "done"
    caplog.set_level(logging.INFO)
    caplog.clear()
    # when: Feishu retries it
    retry = feishu.post(bot, payload)
    # then
    assert retry.status_code == 200
    assert InboundEvent.objects.count() == 1
    assert _records(caplog, logging.WARNING) == []


def test_i30_9_a_replay_under_a_new_event_id_stays_the_usual_dedupe(feishu, make_feishu_bot, caplog):
    bot = make_feishu_bot()
    payload = _dm(bot, app_id=bot.feishu_app_id, message_id="om_replay", text="hello", event_id="ev_r1")
    feishu.post(bot, payload)
    caplog.set_level(logging.INFO)
    caplog.clear()

    replay = feishu.post(bot, {**payload, "header": {**payload["header"], "event_id": "ev_r2"}})

    assert replay.status_code == 200
    assert list(InboundEvent.objects.values_list("event_id", flat=True)) == ["ev_r1"]
    assert _records(caplog, logging.WARNING) == []


def test_i30_9_unknown_disabled_and_rest_only_bots_answer_alike(feishu, make_feishu_bot):
    # given: a Feishu bot (for a valid signed body), a disabled one and a REST-only one
    bot = make_feishu_bot()
    disabled = make_feishu_bot(is_enabled=False)
    rest_only = make_feishu_bot(feishu_verification_token="", feishu_encrypt_key="", feishu_app_id="")
    payload = fixture_payload("message_text_group", bot=bot)
    # when: the same signed body to each address
    answers = [
        feishu.post(bot, payload, slug=slug) for slug in ("no-such-bot", disabled.slug, rest_only.slug, "x" * 5000)
    ]
    # then: one status and one body, naming no slug
    assert {(a.status_code, a.content) for a in answers} == {(404, answers[0].content)}
    assert answers[0].json() == NO_WEBHOOK
    assert InboundEvent.objects.count() == 0


def test_i30_9_a_long_unknown_slug_is_logged_once_and_cut(client, caplog):
    slug = "a" * 5000
    caplog.set_level(logging.INFO)

    response = client.post(f"/feishu/webhook/{slug}/", data=b"{}", content_type="application/json")

    assert (response.status_code, response.json()) == (404, NO_WEBHOOK)
    [line] = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert line.getMessage() == "feishu webhook: no Feishu webhook for this slug"
    assert line.bot == "a" * 64
    assert all("a" * 65 not in record.getMessage() + str(record.__dict__) for record in caplog.records)


def test_i30_9_a_bad_signature_on_a_real_bot_is_a_401_that_names_nothing(feishu, make_feishu_bot):
    # decided: a Feishu bot keeps its 401 (Feishu retries a non-200; its console shows it on the URL check); the
    # body is one fixed sentence that names neither the slug, the app nor a key
    bot = make_feishu_bot()
    payload = {**fixture_payload("message_text_group", bot=bot)}
    payload["header"] = {**payload["header"], "token": "not-the-token"}

    response = feishu.post(bot, payload, encrypt=False)

    assert response.status_code == 401
    assert response.json() == {
        "message": "Verification failed.",
        "extra": {"reason": "The verification token does not match this bot's."},
    }
    body = response.content.decode()
    for value in (bot.slug, bot.feishu_app_id, bot.feishu_verification_token, bot.feishu_encrypt_key):
        assert value not in body
    assert bot_open_id(bot) not in body
    assert InboundEvent.objects.count() == 0
