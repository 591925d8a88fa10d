"""D3: every refused webhook request is counted per bot and reason, shown on the bot's page, and nothing of its
body is kept."""

import json
import time

import pytest

from feishu.inbound.refusals import refusal_counts, webhook_refusal_count
from feishu.inbound.signing import event_request_build
from feishu.models import InboundEvent, WebhookRefusal
from tests.feishu.conftest import fixture_payload

pytestmark = pytest.mark.django_db

MARKER = "body-text-that-must-not-be-kept"


def _counts(bot) -> dict[str, int]:
    return {row.reason: row.count for row in refusal_counts(bot)}


def test_d3_each_reason_is_counted_once_per_request_for_its_bot(feishu, make_feishu_bot, client, settings):
    # given a bot and another one whose counts must stay apart
    bot, other = make_feishu_bot(), make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    payload["event"]["message"]["content"] = json.dumps({"text": MARKER})
    url = f"/feishu/webhook/{bot.slug}/"

    # when: one request per reason, the bad signature twice
    feishu.post(bot, payload, encrypt_key="another-key")  # undecryptable with the bot's key
    forged = {**payload, "header": {**payload["header"], "token": "forged-token"}}
    feishu.post(bot, forged)  # wrong token
    feishu.post(bot, payload, timestamp=int(time.time()) - settings.FEISHU_MAX_EVENT_AGE_SECONDS - 5)  # stale
    client.post(url, data=b"{not json " + MARKER.encode(), content_type="application/json")  # malformed
    signed = event_request_build(payload=payload, encrypt_key=bot.feishu_encrypt_key)
    resigned = event_request_build(payload={**payload, "note": MARKER}, encrypt_key=bot.feishu_encrypt_key)
    headers = {k: v for k, v in signed.django_headers().items() if k != "HTTP_CONTENT_TYPE"}
    for _ in range(2):  # another body under this one's signature: the signature does not match
        client.post(url, data=resigned.body, content_type="application/json", **headers)
    feishu.post(bot, payload)  # accepted: not counted

    # then
    assert _counts(bot) == {
        "undecryptable": 1,
        "wrong_token": 1,
        "stale": 1,
        "malformed": 1,
        "bad_signature": 2,
    }
    assert _counts(other) == {}
    assert InboundEvent.objects.count() == 1  # only the accepted request
    kept = json.dumps(list(WebhookRefusal.objects.values()), default=str)
    assert MARKER not in kept and "forged-token" not in kept


def test_d3_unknown_and_disabled_bots_are_counted_without_keeping_the_slug(feishu, make_feishu_bot):
    disabled = make_feishu_bot(is_enabled=False)
    payload = fixture_payload("message_text_group", bot=disabled)

    feishu.post(disabled, payload)
    feishu.post(disabled, payload, slug="no-such-bot")
    feishu.post(disabled, payload, slug="another-unknown-slug")

    assert _counts(disabled) == {"unknown_bot": 1}
    assert _counts(None) == {"unknown_bot": 2}  # one bounded row for every slug that names no bot
    assert "no-such-bot" not in json.dumps(list(WebhookRefusal.objects.values()), default=str)


def test_d3_counting_adds_to_one_row_and_moves_last_at(make_feishu_bot):
    bot = make_feishu_bot()

    webhook_refusal_count(bot=bot, reason=WebhookRefusal.Reason.STALE)
    first = WebhookRefusal.objects.get()
    webhook_refusal_count(bot=bot, reason=WebhookRefusal.Reason.STALE)

    row = WebhookRefusal.objects.get()
    assert (row.pk, row.count, row.first_at) == (first.pk, 2, first.first_at)
    assert row.last_at >= first.last_at


def test_d3_the_bot_page_shows_each_reason_with_its_count_and_last_time(admin_client, feishu, make_feishu_bot):
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    feishu.post(bot, {**payload, "header": {**payload["header"], "token": "forged"}})
    feishu.post(bot, {**payload, "header": {**payload["header"], "token": "forged"}})

    response = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/")

    page = response.content.decode()
    assert [(r.reason, r.count) for r in response.context["bot_overview"].refusals] == [("wrong_token", 2)]
    assert 'data-refusal="wrong_token">Wrong verification token: 2 (last at ' in page


def test_d3_a_refused_request_is_a_health_warning_linking_to_the_counts(admin_client, feishu, make_feishu_bot):
    # given a bot whose app posts with a token the hub does not know (a misconfigured app)
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    feishu.post(bot, {**payload, "header": {**payload["header"], "token": "forged"}})

    # when the operator opens the bot's page
    response = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/")

    # then its health says so in a sentence, as a warning, with the link to the counts on that page
    row = response.context["bot_overview"].health
    cause = next(cause for cause in row.causes if cause[0] == "webhook_refused")
    assert "were refused in the last 24 hours" in cause[1]
    assert cause[2] == f"/admin/agents/bot/{bot.pk}/change/#bot-webhook-refusals"
    assert 'id="bot-webhook-refusals"' in response.content.decode()


def test_d3_refusals_are_scraped_per_bot_and_reason(client, feishu, make_feishu_bot, settings):
    # given: two refused requests for a bot, and one to a slug that names no bot
    settings.AMUX_METRICS_TOKEN = ""
    settings.AMUX_METRICS_ALLOWED_IPS = ["127.0.0.1"]
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    for _ in range(2):
        feishu.post(bot, {**payload, "header": {**payload["header"], "token": "forged"}})
    client.post("/feishu/webhook/no-such-bot/", data=b"{}", content_type="application/json")

    # when Prometheus scrapes
    text = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()

    # then each bot and reason is a counter
    assert f'amux_webhook_refused_total{{bot="{bot.slug}",reason="wrong_token"}} 2.0' in text
    assert 'amux_webhook_refused_total{bot="",reason="unknown_bot"} 1.0' in text
