"""The sandbox seam (feishu/outbound/sandbox.py): a sandbox bot's Feishu calls never leave the machine, a real bot's
calls are never swallowed, whatever chat or message they name."""

import pytest
import requests

from agents.models import Bot
from console.models import CHAT_ID_PREFIX, MESSAGE_ID_PREFIX
from feishu.models import SandboxCall
from feishu.outbound import cardkit as feishu_cardkit
from feishu.outbound import reads as feishu_reads
from feishu.outbound import sends as feishu_sends
from feishu.outbound.api_errors import FeishuApiError
from feishu.outbound.cards import markdown_card
from feishu.outbound.sandbox import SANDBOX_CARD_PREFIX, SANDBOX_MESSAGE_PREFIX, SANDBOX_REACTION_PREFIX

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_http(monkeypatch):
    """Any HTTP request from this process fails the test: the sandbox must answer without one."""
    sent: list[str] = []

    def refuse(method, url, **kwargs):
        sent.append(f"{method} {url}")
        raise AssertionError(f"a sandbox call went out: {method} {url}")

    monkeypatch.setattr(requests, "request", refuse)
    monkeypatch.setattr(requests, "get", lambda url, **kwargs: refuse("GET", url))
    return sent


def test_every_call_of_a_sandbox_bot_is_answered_and_recorded_on_this_machine(make_feishu_bot, feishu_stub, no_http):
    # given: a sandbox bot, even one whose fields hold what look like real Feishu credentials
    bot = make_feishu_bot(slug="sandboxed", is_sandbox=True, sandbox_of=make_feishu_bot(slug="hub"))
    source = MESSAGE_ID_PREFIX + "abc"

    # when: every kind of outbound call the bridge makes (text, card, streaming update, settings, reactions)
    reply = feishu_sends.message_reply(bot=bot, message_id=source, text="hi", uuid="u1", reply_in_thread=True)
    created = feishu_sends.message_create(bot=bot, chat_id=CHAT_ID_PREFIX + "x", text="hello", uuid="u2")
    card_id = feishu_cardkit.card_create(bot=bot, card=markdown_card(text="draft", streaming=True))
    feishu_cardkit.card_element_content_update(
        bot=bot, card_id=card_id, element_id="content", content="draft 2", sequence=1
    )
    feishu_cardkit.card_settings_update(bot=bot, card_id=card_id, settings={"config": {}}, sequence=2)
    sent_card = feishu_sends.message_reply_content(
        bot=bot,
        message_id=source,
        msg_type="interactive",
        content=feishu_cardkit.card_reference(card_id),
        uuid="u3",
        reply_in_thread=False,
    )
    reaction_id = feishu_sends.reaction_create(bot=bot, message_id=source, emoji_type="OnIt")
    feishu_sends.reaction_delete(bot=bot, message_id=source, reaction_id=reaction_id)
    with pytest.raises(FeishuApiError):
        feishu_reads.message_get(bot=bot, message_id=source)
    with pytest.raises(FeishuApiError):
        feishu_reads.message_resource_get(bot=bot, message_id=source, file_key="img_1", type="image", max_bytes=10)

    # then: answers in Feishu's shapes, nothing reached the stub (nor any host), every call is recorded
    assert reply.message_id.startswith(SANDBOX_MESSAGE_PREFIX) and reply.thread_id
    assert created.message_id.startswith(SANDBOX_MESSAGE_PREFIX)
    assert card_id.startswith(SANDBOX_CARD_PREFIX)
    assert sent_card.message_id.startswith(SANDBOX_MESSAGE_PREFIX)
    assert reaction_id.startswith(SANDBOX_REACTION_PREFIX)
    assert no_http == []
    assert feishu_stub.requests == []
    recorded = list(SandboxCall.objects.filter(app_id=bot.bridge_id).values_list("method", "path"))
    assert recorded == [
        ("POST", f"/open-apis/im/v1/messages/{source}/reply"),
        ("POST", "/open-apis/im/v1/messages"),
        ("POST", "/open-apis/cardkit/v1/cards"),
        ("PUT", f"/open-apis/cardkit/v1/cards/{card_id}/elements/content/content"),
        ("PATCH", f"/open-apis/cardkit/v1/cards/{card_id}/settings"),
        ("POST", f"/open-apis/im/v1/messages/{source}/reply"),
        ("POST", f"/open-apis/im/v1/messages/{source}/reactions"),
        ("DELETE", f"/open-apis/im/v1/messages/{source}/reactions/{reaction_id}"),
        ("GET", f"/open-apis/im/v1/messages/{source}"),
    ]
    assert SandboxCall.objects.filter(path__contains="access_token").count() == 0  # the token exchange: not kept
    assert Bot.objects.get(pk=bot.pk).has_feishu_credentials is False


def test_a_real_bot_reaches_feishu_even_in_a_chat_or_message_that_looks_like_the_playground(
    make_feishu_bot, feishu_stub
):
    # given: a real bot, and ids that carry the playground's prefixes
    bot = make_feishu_bot(slug="real")
    source = MESSAGE_ID_PREFIX + "abc"

    # when
    feishu_sends.message_reply(bot=bot, message_id=source, text="hi", uuid="u1", reply_in_thread=False)
    feishu_sends.message_create(bot=bot, chat_id=CHAT_ID_PREFIX + "x", text="hello", uuid="u2")
    card_id = feishu_cardkit.card_create(bot=bot, card=markdown_card(text="draft", streaming=True))
    feishu_sends.reaction_create(bot=bot, message_id=source, emoji_type="OnIt")

    # then: every call reached (the stub of) Feishu, none was recorded as a sandbox call
    routes = [request.route for request in feishu_stub.requests if request.route != "token"]
    assert routes == ["reply", "create", "card_create", "reaction_create"]
    assert not card_id.startswith(SANDBOX_CARD_PREFIX)
    assert SandboxCall.objects.count() == 0
