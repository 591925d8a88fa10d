"""F1: the webhook — lark-oapi verifies and decrypts; our policy refuses stale, malformed and oversized requests.

Every refusal is a 4xx (never a 500, which would invite Feishu's retries) and stores nothing.
"""

import json
import logging
import secrets
import time

import pytest

from core.parsers import MAX_JSON_DEPTH
from feishu.inbound.signing import event_encrypt, event_request_build, mention_entry, message_event_payload
from feishu.models import InboundEvent
from tests.feishu.conftest import fixture_payload
from tests.security.feishu_requests import ascii_json, nested_array, nested_object, post_signed

pytestmark = pytest.mark.django_db


def test_f1_plain_challenge_is_answered(feishu, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    payload = fixture_payload("url_verification", bot=bot)
    # when
    response = feishu.post(bot, payload, encrypt=False)
    # then
    assert response.status_code == 200
    assert response.json() == {"challenge": "ajls384kdjxxxx"}
    assert InboundEvent.objects.count() == 0


def test_f1_encrypted_challenge_is_answered(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    payload = fixture_payload("url_verification", bot=bot)

    response = feishu.post(bot, payload, encrypt=True)

    assert response.status_code == 200
    assert response.json() == {"challenge": "ajls384kdjxxxx"}


def test_f1_challenge_with_wrong_token_is_refused(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    payload = {**fixture_payload("url_verification", bot=bot), "token": "not-the-token"}

    response = feishu.post(bot, payload, encrypt=False)

    assert response.status_code == 401
    assert response.json()["message"] == "Verification failed."


def test_f1_signed_encrypted_event_is_stored_once_with_event_id(feishu, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    # when
    response = feishu.post(bot, payload)
    # then
    assert response.status_code == 200
    assert response.json() == {"msg": "success"}
    event = InboundEvent.objects.get()
    assert (event.bot_id, event.message_id, event.event_id, event.event_type) == (
        bot.pk,
        "om_5ce6d572455d361153b7cb51da133945",
        "5e3702a84e847582be8db7fb73283c02",
        "im.message.receive_v1",
    )
    assert "token" not in event.payload["header"]  # C3: the verification token is not stored


def test_f1_bad_signature_is_refused_and_nothing_stored(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)

    response = feishu.post(bot, payload, encrypt_key="another-key")  # signed and encrypted with the wrong key

    # lark-oapi decrypts before it checks the signature: the wrong key already fails the decryption
    assert response.status_code == 400
    assert response.json() == {
        "message": "Event could not be read.",
        "extra": {"reason": "The body could not be decrypted with this bot's encrypt key."},
    }
    assert InboundEvent.objects.count() == 0


def test_f1_tampered_body_fails_the_signature(client, make_feishu_bot):
    bot = make_feishu_bot()
    request = event_request_build(
        payload=fixture_payload("message_text_group", bot=bot), encrypt_key=bot.feishu_encrypt_key
    )
    other = json.dumps(
        {
            "encrypt": event_encrypt(
                plaintext=json.dumps(fixture_payload("message_text_p2p", bot=bot)), encrypt_key=bot.feishu_encrypt_key
            )
        }
    ).encode()

    response = client.post(
        f"/feishu/webhook/{bot.slug}/", data=other, content_type="application/json", **_headers(request)
    )

    assert response.status_code == 401
    assert response.json()["extra"]["reason"] == "The signature does not match the body."
    assert InboundEvent.objects.count() == 0


def test_f1_wrong_verification_token_is_refused(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    payload["header"]["token"] = "forged-token"

    response = feishu.post(bot, payload)

    assert response.status_code == 401
    assert response.json()["extra"]["reason"] == "The verification token does not match this bot's."
    assert InboundEvent.objects.count() == 0


def test_f1_stale_timestamp_is_refused_even_when_signed(feishu, make_feishu_bot, settings):
    # given: a correctly signed event whose timestamp is older than FEISHU_MAX_EVENT_AGE_SECONDS
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    stale = int(time.time()) - settings.FEISHU_MAX_EVENT_AGE_SECONDS - 5
    # when
    response = feishu.post(bot, payload, timestamp=stale)
    # then
    assert response.status_code == 400
    assert response.json() == {"message": "Request timestamp is too old.", "extra": {}}
    assert InboundEvent.objects.count() == 0


def test_f1_timestamp_within_the_window_is_accepted(feishu, make_feishu_bot, settings):
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)

    response = feishu.post(bot, payload, timestamp=int(time.time()) - settings.FEISHU_MAX_EVENT_AGE_SECONDS + 30)

    assert response.status_code == 200
    assert InboundEvent.objects.count() == 1


def test_f1_malformed_json_is_a_400(client, make_feishu_bot):
    bot = make_feishu_bot()

    response = client.post(f"/feishu/webhook/{bot.slug}/", data=b"{not json", content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {"message": "Body is not JSON.", "extra": {}}
    assert InboundEvent.objects.count() == 0


def test_f1_undecryptable_body_is_a_4xx(client, make_feishu_bot):
    bot = make_feishu_bot()

    response = client.post(
        f"/feishu/webhook/{bot.slug}/", data=b'{"encrypt": "bm90IGEgY2lwaGVydGV4dA=="}', content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json() == {
        "message": "Event could not be read.",
        "extra": {"reason": "The body could not be decrypted with this bot's encrypt key."},
    }
    assert InboundEvent.objects.count() == 0


def test_f1_unknown_event_type_is_acknowledged_and_ignored(feishu, make_feishu_bot):
    bot = make_feishu_bot()
    payload = fixture_payload("bot_added_to_chat", bot=bot)
    payload["header"]["event_type"] = "im.message.reaction.created_v1"  # a type the bridge does not handle

    response = feishu.post(bot, payload)

    assert response.status_code == 200
    assert response.json() == {"msg": "ignored"}
    assert InboundEvent.objects.count() == 0


def test_f1_oversized_body_is_a_413(client, make_feishu_bot, settings):
    bot = make_feishu_bot()
    body = json.dumps({"encrypt": "A" * (settings.FEISHU_MAX_BODY_BYTES + 10)}).encode()

    response = client.post(f"/feishu/webhook/{bot.slug}/", data=body, content_type="application/json")

    assert response.status_code == 413
    assert InboundEvent.objects.count() == 0


def test_f1_body_over_djangos_upload_limit_is_a_413_not_a_500(client, make_feishu_bot, settings):
    bot = make_feishu_bot()
    settings.FEISHU_MAX_BODY_BYTES = 10 * 1024 * 1024
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024

    response = client.post(f"/feishu/webhook/{bot.slug}/", data=b"x" * 4096, content_type="application/json")

    assert response.status_code == 413
    assert InboundEvent.objects.count() == 0


def test_f1_unknown_or_disabled_bot_is_a_404(feishu, make_feishu_bot):
    bot = make_feishu_bot(is_enabled=False)
    payload = fixture_payload("message_text_group", bot=bot)

    disabled = feishu.post(bot, payload)
    unknown = feishu.post(bot, payload, slug="no-such-bot")

    assert (disabled.status_code, unknown.status_code) == (404, 404)
    assert InboundEvent.objects.count() == 0


def test_f1_get_is_not_allowed(client, make_feishu_bot):
    bot = make_feishu_bot()

    response = client.get(f"/feishu/webhook/{bot.slug}/")

    assert response.status_code == 405


def test_f1_handler_is_rebuilt_when_credentials_change(feishu, make_feishu_bot):
    # given: the handler cached with the old key
    bot = make_feishu_bot()
    assert feishu.post(bot, fixture_payload("url_verification", bot=bot), encrypt=True).status_code == 200
    # when: the operator rotates the encrypt key
    bot.feishu_encrypt_key = "rotated-encrypt-key"
    bot.save()
    response = feishu.post(bot, fixture_payload("message_text_group", bot=bot))
    # then
    assert response.status_code == 200
    assert InboundEvent.objects.count() == 1


def test_ping_is_a_trivial_view(client):
    response = client.get("/feishu/ping/")

    assert response.status_code == 200
    assert response.json() == {"msg": "pong"}


def _headers(request) -> dict:
    return {k: v for k, v in request.django_headers().items() if k != "HTTP_CONTENT_TYPE"}


def test_f1_far_future_timestamp_is_refused(feishu, make_feishu_bot, settings):
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)

    response = feishu.post(bot, payload, timestamp=int(time.time()) + settings.FEISHU_MAX_EVENT_AGE_SECONDS + 60)

    assert response.status_code == 400
    assert InboundEvent.objects.count() == 0


def test_f1_the_request_only_stores_and_enqueues_no_feishu_or_llm_call(feishu, make_feishu_bot, llm_stub, mocker):
    from feishu.tasks import inbound_event_process

    # given: the processing task is queued, not run (as with a real broker)
    bot = make_feishu_bot()
    enqueue = mocker.patch.object(inbound_event_process, "apply_async")
    # when
    response = feishu.post(bot, fixture_payload("message_text_group", bot=bot))
    # then
    assert response.status_code == 200
    event = InboundEvent.objects.get()
    enqueue.assert_called_once_with(args=[event.pk], retry=False)
    assert event.status == "pending"
    assert feishu.stub.requests == []
    assert llm_stub.requests == []


def test_f1_bot_without_a_feishu_app_has_no_webhook(feishu, make_feishu_bot):
    # given: no verification token, so lark-oapi would accept unauthenticated events
    bot = make_feishu_bot(feishu_verification_token="", feishu_encrypt_key="")
    payload = fixture_payload("message_text_group", bot=bot)
    payload["header"].pop("token")

    response = feishu.post(bot, payload, encrypt=False)

    assert response.status_code == 404
    assert response.json() == {"message": "There is no Feishu webhook at this address.", "extra": {}}
    assert InboundEvent.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_f1_a_cached_bot_costs_the_webhook_one_query_the_insert(feishu, make_feishu_bot, mocker):
    """The bot row is read once per BOT_CACHE_SECONDS; a request then costs one autocommitted INSERT."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from feishu.tasks import inbound_event_process

    bot = make_feishu_bot()
    mocker.patch.object(inbound_event_process, "apply_async")
    assert feishu.say(bot, text="first", mention=[bot])[0].status_code == 200
    # when
    with CaptureQueriesContext(connection) as queries:
        response, _ = feishu.say(bot, text="second", mention=[bot])
    # then
    assert response.status_code == 200
    assert [query["sql"].split()[0] for query in queries.captured_queries] == ["INSERT"]
    assert InboundEvent.objects.count() == 2


def test_f1_bot_cache_expires_and_a_save_in_this_process_drops_it_at_once(make_feishu_bot):
    from django.db import connection

    from agents.models import Bot
    from feishu.inbound.webhook_bots import BOT_CACHE_SECONDS, webhook_bot_get

    bot = make_feishu_bot()
    assert webhook_bot_get(slug=bot.slug, now=0.0).pk == bot.pk
    # another worker disables it (no signal here): served from the cache until the entry expires
    Bot.objects.filter(pk=bot.pk).update(is_enabled=False)
    assert webhook_bot_get(slug=bot.slug, now=BOT_CACHE_SECONDS - 1).pk == bot.pk
    assert webhook_bot_get(slug=bot.slug, now=BOT_CACHE_SECONDS + 1) is None
    # a save in this process takes effect at once
    Bot.objects.filter(pk=bot.pk).update(is_enabled=True)
    assert webhook_bot_get(slug=bot.slug, now=100.0).pk == bot.pk
    bot.refresh_from_db()
    bot.is_enabled = False
    bot.save()
    assert webhook_bot_get(slug=bot.slug, now=100.5) is None
    # a bot deleted and created again under the same slug is the new row at once
    Bot.objects.filter(pk=bot.pk).update(is_enabled=True)
    assert webhook_bot_get(slug=bot.slug, now=200.0).pk == bot.pk
    slug = bot.slug
    with connection.cursor() as cursor:  # deleted by another process: no signal here
        cursor.execute(f"DELETE FROM {Bot._meta.db_table} WHERE id = %s", [bot.pk])
    successor = make_feishu_bot(slug=slug)
    assert webhook_bot_get(slug=slug, now=200.5).pk == successor.pk


@pytest.mark.parametrize("event", [{"message": "not an object"}, ["a", "list"], {"message": {"message_id": 42}}])
def test_f1_an_authenticated_shapeless_event_is_acknowledged_not_a_500(feishu, make_feishu_bot, event):
    """F1: a signed event of a handled type whose body we cannot read is answered 200 (no retries), not stored."""
    bot = make_feishu_bot()
    payload = fixture_payload("message_text_group", bot=bot)
    payload["event"] = event

    response = feishu.post(bot, payload)

    assert response.status_code == 200
    assert response.json() == {"msg": "ignored"}
    assert InboundEvent.objects.count() == 0


def test_f1_a_garbled_content_length_is_a_400_not_a_500(client, make_feishu_bot):
    bot = make_feishu_bot()

    response = client.post(
        f"/feishu/webhook/{bot.slug}/", data=b'{"a": 1}', content_type="application/json", CONTENT_LENGTH="abc"
    )

    assert response.status_code == 400
    assert response.json() == {"message": "Bad Content-Length header.", "extra": {}}
    assert InboundEvent.objects.count() == 0


# --- issue 10: hostile bodies (depth, NUL and surrogates, oversized ids) and worded refusals ----------------


def _errors(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


def _event_text(bot, **fields) -> str:
    """A signed-ready receive event as ASCII JSON; `fields` override message/sender/header parts by dotted name."""
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id="om_" + secrets.token_hex(8),
        chat_id="oc_group",
        text="hello",
        sender_open_id="ou_alice",
        mentions=[mention_entry(index=1, open_id="ou_carol", name="Carol")],
    )
    for dotted, value in fields.items():
        target = payload
        *parents, last = dotted.split(".")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value
    return ascii_json(payload)


@pytest.mark.parametrize("body", [nested_array(1000), nested_object(1000)], ids=["arrays", "objects"])
def test_i10_1_a_depth_bomb_is_a_400_stores_nothing_and_logs_no_error(client, make_feishu_bot, caplog, body):
    # given
    bot = make_feishu_bot()
    # when
    response = post_signed(client, bot, plaintext=body, encrypt=False)
    # then
    assert response.status_code == 400
    assert response.json() == {"message": f"Body is nested deeper than {MAX_JSON_DEPTH} levels.", "extra": {}}
    assert InboundEvent.objects.count() == 0
    assert _errors(caplog) == []


def test_i10_1_a_depth_bomb_inside_encrypt_is_a_400_stores_nothing_and_logs_no_error(client, make_feishu_bot, caplog):
    # given: a validly encrypted and signed body whose plaintext nests 1,000 deep
    bot = make_feishu_bot()
    plaintext = '{"schema": "2.0", "header": {"event_type": "im.message.receive_v1"}, "event": ' + nested_object(1000)
    plaintext += "}"
    # when
    response = post_signed(client, bot, plaintext=plaintext)
    # then
    assert response.status_code == 400
    assert response.json() == {"message": f"Body is nested deeper than {MAX_JSON_DEPTH} levels.", "extra": {}}
    assert InboundEvent.objects.count() == 0
    assert _errors(caplog) == []


def test_i10_1_an_event_nested_50_deep_is_still_stored(feishu, make_feishu_bot):
    # given: a real event carrying an extra field nested 50 deep (52 levels in all, under the bound of 64)
    bot = make_feishu_bot()
    text = _event_text(bot)
    text = text[:-1] + ', "extra": ' + nested_array(50) + "}"
    # when
    response = post_signed(feishu.client, bot, plaintext=text)
    # then
    assert response.status_code == 200
    assert response.json() == {"msg": "success"}
    assert InboundEvent.objects.count() == 1


def test_i10_1_message_content_nested_too_deep_is_acknowledged_and_ignored(feishu, make_feishu_bot, caplog):
    # given: the message's content (a JSON string the worker decodes) nests 1,000 deep
    bot = make_feishu_bot()
    # when
    response = post_signed(
        feishu.client, bot, plaintext=_event_text(bot, **{"event.message.content": nested_array(1000)})
    )
    # then: authenticated, so Feishu's 200-and-ignore; nothing stored, one warning, no error
    assert response.status_code == 200
    assert response.json() == {"msg": "ignored"}
    assert InboundEvent.objects.count() == 0
    ignored = [r for r in caplog.records if r.getMessage() == "feishu event ignored"]
    assert [r.reason for r in ignored] == [f"event.message.content is nested deeper than {MAX_JSON_DEPTH} levels."]
    assert _errors(caplog) == []


@pytest.mark.parametrize(
    ("field", "value", "stored_path", "stored"),
    [
        ("event.message.chat_id", "oc_\x00", ("event", "message", "chat_id"), "oc_\ufffd"),
        ("event.sender.sender_id.open_id", "\ud800", ("event", "sender", "sender_id", "open_id"), "\ufffd"),
        ("event.message.mentions.0.name", "\ud800", ("event", "message", "mentions", 0, "name"), "\ufffd"),
        ("event.message.message_id", "om_\ud800x", ("event", "message", "message_id"), "om_\ufffdx"),
        ("header.event_id", "ev_\ud800", ("header", "event_id"), "ev_\ufffd"),
    ],
    ids=["nul-chat-id", "surrogate-sender", "surrogate-mention-name", "surrogate-message-id", "surrogate-event-id"],
)
def test_i10_2_nul_and_surrogates_are_made_storable_once_and_the_event_is_processed(
    feishu, make_feishu_bot, caplog, field, value, stored_path, stored
):
    # given
    bot = make_feishu_bot()
    # when
    response = post_signed(feishu.client, bot, plaintext=_event_text(bot, **{field: value}))
    # then: stored once with U+FFFD in place of the unstorable character, and processed without an error
    assert response.status_code == 200
    assert response.json() == {"msg": "success"}
    event = InboundEvent.objects.get()
    found = event.payload
    for key in stored_path:
        found = found[key]
    assert found == stored
    assert (event.message_id == stored) == (field == "event.message.message_id")
    assert (event.event_id == stored) == (field == "header.event_id")
    assert event.status == InboundEvent.Status.DONE
    assert _errors(caplog) == []


@pytest.mark.parametrize(
    ("field", "limit"),
    [
        ("header.event_id", 64),
        ("event.message.message_id", 64),
        ("event.message.chat_id", 64),
        ("event.message.root_id", 64),
        ("event.sender.sender_id.open_id", 64),
        ("event.message.mentions.0.id.open_id", 64),
        ("event.message.mentions.0.name", 200),
    ],
)
def test_i10_2_an_id_longer_than_its_column_is_acknowledged_ignored_and_logged_once(
    feishu, make_feishu_bot, caplog, field, limit
):
    # given
    bot = make_feishu_bot()
    # when
    response = post_signed(feishu.client, bot, plaintext=_event_text(bot, **{field: "x" * (limit + 1)}))
    # then
    assert response.status_code == 200
    assert response.json() == {"msg": "ignored"}
    assert InboundEvent.objects.count() == 0
    ignored = [r for r in caplog.records if r.getMessage() == "feishu event ignored"]
    assert len(ignored) == 1
    assert ignored[0].reason == f"{field.replace('.0.', '[].')} is longer than {limit} characters."
    assert _errors(caplog) == []


def test_i10_2_ids_exactly_as_long_as_their_columns_are_stored(feishu, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    text = _event_text(bot, **{"event.message.message_id": "m" * 64, "header.event_id": "e" * 64})
    # when
    response = post_signed(feishu.client, bot, plaintext=text)
    # then
    assert response.status_code == 200
    assert InboundEvent.objects.get().message_id == "m" * 64


@pytest.mark.parametrize("missing", ["HTTP_X_LARK_SIGNATURE", "HTTP_X_LARK_REQUEST_NONCE"])
def test_i10_6_a_missing_signature_header_is_a_worded_401_not_an_exceptions_text(client, make_feishu_bot, missing):
    # given
    bot = make_feishu_bot()
    header = {"HTTP_X_LARK_SIGNATURE": "X-Lark-Signature", "HTTP_X_LARK_REQUEST_NONCE": "X-Lark-Request-Nonce"}
    # when
    response = post_signed(client, bot, plaintext=_event_text(bot), drop_headers=(missing,))
    # then
    assert response.status_code == 401
    assert response.json() == {
        "message": "Verification failed.",
        "extra": {"reason": f"The request has no {header[missing]} header; Feishu signs every event."},
    }
    assert "NoneType" not in response.content.decode()
    assert InboundEvent.objects.count() == 0


@pytest.mark.parametrize(
    "plaintext",
    ['{"schema": "2.0", "header": []}', '{"schema": "2.0", "header": "x"}', '{"uuid": "u", "event": []}'],
)
def test_i10_6_a_body_lark_oapi_cannot_read_is_a_worded_400(client, make_feishu_bot, plaintext):
    # given: signed and encrypted, but not shaped like an event (lark-oapi raises AttributeError on it)
    bot = make_feishu_bot()
    # when
    response = post_signed(client, bot, plaintext=plaintext)
    # then
    assert response.status_code == 400
    assert response.json() == {
        "message": "Event could not be read.",
        "extra": {"reason": "The body is not a Feishu event."},
    }
    assert "object has no attribute" not in response.content.decode()
    assert InboundEvent.objects.count() == 0
