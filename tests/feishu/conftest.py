"""Feishu bridge fixtures: a local Feishu (stub server) the real lark-oapi client talks to, bots with Feishu
credentials, and a helper that posts fixture payloads signed and encrypted exactly as Feishu does."""

import json
import secrets
import threading
from pathlib import Path
from typing import Any

import pytest
from django.test import TestCase

from agents.models import Bot
from feishu.inbound import webhook as feishu_webhook
from feishu.inbound import webhook_bots
from feishu.inbound.longconn import LongConnection
from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload
from feishu.outbound import client as feishu_client
from feishu.outbound.sdk import LocalCache, TokenManager
from tests.agents.factories import BotFactory
from tests.stubs.feishu_server import FeishuStub, FeishuStubServer
from tests.stubs.feishu_ws_server import FeishuWsStub

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "feishu"


def bot_open_id(bot: Bot) -> str:
    """The open_id the stub's bot/v3/info reports for a bot's app."""
    return f"ou_bot_{bot.feishu_app_id}"


def listed_mention(bot: Bot) -> list[dict]:
    """An @ of the bot as im.v1.message.list gives it (the `mentions` of the REST stub's `add_message`)."""
    return [{"key": "@_user_1", "id": bot_open_id(bot), "id_type": "open_id", "name": bot.name}]


def fixture_payload(name: str, *, bot: Bot) -> dict[str, Any]:
    raw = (FIXTURES / f"{name}.json").read_text()
    raw = (
        raw.replace("{{token}}", bot.feishu_verification_token)
        .replace("{{app_id}}", bot.feishu_app_id)
        .replace("{{bot_open_id}}", bot_open_id(bot))
    )
    return json.loads(raw)


class FeishuHarness:
    """Posts events to the webhook as Feishu would and runs what they enqueue (Celery is eager in tests)."""

    def __init__(self, client, stub: FeishuStub) -> None:
        self.client = client
        self.stub = stub

    def post(
        self,
        bot: Bot,
        payload: dict[str, Any],
        *,
        encrypt: bool = True,
        timestamp: int | None = None,
        encrypt_key: str | None = None,
        slug: str | None = None,
    ):
        request = event_request_build(
            payload=payload,
            encrypt_key=bot.feishu_encrypt_key if encrypt_key is None else encrypt_key,
            encrypt=encrypt,
            timestamp=timestamp,
        )
        with TestCase.captureOnCommitCallbacks(execute=True):
            return self.client.post(
                f"/feishu/webhook/{slug or bot.slug}/",
                data=request.body,
                content_type="application/json",
                **{k: v for k, v in request.django_headers().items() if k != "HTTP_CONTENT_TYPE"},
            )

    def say(
        self,
        bot: Bot,
        *,
        text: str,
        message_id: str | None = None,
        chat_id: str = "oc_group",
        mention: list[Bot] | None = None,
        sender: str = "ou_alice",
        chat_type: str = "group",
        root_id: str = "",
        parent_id: str = "",
        thread_id: str = "",
        event_id: str | None = None,
        at_all: bool = False,
    ):
        """A user message as `bot`'s app receives it; `mention` bots are @-ed in front of the text; `at_all`: an
        @all as Feishu marks it (a mention keyed `@_all` in front of the text)."""
        mentions = []
        prefix = ""
        if at_all:
            mentions.append({"key": "@_all", "id": {"open_id": "", "union_id": "", "user_id": ""}, "name": "All"})
            prefix = "@_all "
        for index, mentioned in enumerate(mention or [], start=1):
            mentions.append(mention_entry(index=index, open_id=bot_open_id(mentioned), name=mentioned.name))
            prefix += f"@_user_{index} "
        payload = message_event_payload(
            verification_token=bot.feishu_verification_token,
            app_id=bot.feishu_app_id,
            message_id=message_id or "om_" + secrets.token_hex(8),
            chat_id=chat_id,
            text=prefix + text,
            sender_open_id=sender,
            chat_type=chat_type,
            root_id=root_id,
            parent_id=parent_id,
            thread_id=thread_id,
            mentions=mentions,
            event_id=event_id,
        )
        return self.post(bot, payload), payload


@pytest.fixture
def feishu_stub(settings):
    """F4: a local Feishu on 127.0.0.1; the real lark-oapi client reaches it through FEISHU_DOMAIN."""
    server = FeishuStubServer().start()
    settings.FEISHU_DOMAIN = server.url
    TokenManager.cache = LocalCache()  # the SDK's token cache is process-global
    feishu_client._clients.clear()
    feishu_webhook._handlers.clear()
    webhook_bots._bots.clear()
    yield server.stub
    server.stop()
    TokenManager.cache = LocalCache()


@pytest.fixture
def make_feishu_bot(db):
    def make(slug: str = "", name: str = "", **fields: Any) -> Bot:
        suffix = secrets.token_hex(4)
        slug = slug or f"bot-{suffix}"
        defaults = {
            "feishu_app_id": f"cli_{slug.replace('-', '_')}_{suffix}",
            "feishu_app_secret": f"app-secret-{suffix}",
            "feishu_encrypt_key": f"encrypt-key-{suffix}",
            "feishu_verification_token": f"verification-token-{suffix}",
        }
        defaults.update(fields)
        return BotFactory(slug=slug, name=name or slug.title(), **defaults)

    return make


@pytest.fixture
def feishu(client, feishu_stub) -> FeishuHarness:
    return FeishuHarness(client, feishu_stub)


@pytest.fixture
def ws_stub(settings):
    """The long-connection websocket stub, with the hub pointed at it."""
    stub = FeishuWsStub(reconnect_nonce=0, reconnect_interval=1).start()
    settings.FEISHU_LONG_CONNECTION_DOMAIN = stub.url
    yield stub
    stub.stop()


@pytest.fixture
def connect(ws_stub):
    """Run a bot's LongConnection in a thread (as its child process would); stopped at teardown."""
    running: list[tuple[LongConnection, threading.Thread]] = []

    def start(bot: Bot) -> LongConnection:
        connection = LongConnection(bot=bot)
        thread = threading.Thread(target=connection.run, name="longconn-test", daemon=True)
        thread.start()
        running.append((connection, thread))
        ws_stub.wait_connections(1)
        return connection

    yield start
    for connection, thread in running:
        connection.stop()
        thread.join(timeout=15)
        assert not thread.is_alive()


@pytest.fixture
def long_connection_bot(make_feishu_bot, ws_stub):
    # Plain replies, no receipt: these tests count intake and replies, one Feishu call per answer.
    bot = make_feishu_bot(
        name="Planner", feishu_event_mode=Bot.FeishuEventMode.LONG_CONNECTION, reply_format="text", receipt_emoji=""
    )
    ws_stub.app_secrets[bot.feishu_app_id] = bot.feishu_app_secret
    return bot
