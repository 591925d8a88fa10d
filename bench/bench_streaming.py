"""Replies people can watch (issue 13): receipt and streaming-card latency through a real Celery worker.

Setup: the bench's own database (as bench_turns: `<name>_bench_turns` on PostgreSQL, else a temporary SQLite
file), the local Feishu (tests/stubs/feishu_server, its rate limits on) and the LLM stub in this process, and a
real `celery -A amuxweb worker --pool=solo` pointed at both (REDIS_URL is required: without a broker there is
no worker to measure; the bench says so and stops). A bot with a Feishu app and an OpenAI-chat model at the stub
that streams STREAM_WORDS words, one every CHUNK_DELAY_SECONDS (a fast model: ~100 tokens/s). One signed,
encrypted `im.message.receive_v1` @-mention at a time is posted to the webhook (in-process WSGI) and the turn is
waited for (delivered), TURNS times, each in its own chat (so no reply waits for another's send budget).

Reported (monotonic clocks of one machine; the stubs record when each request arrived):
- webhook 200 -> reaction at the stub: the receipt's latency as a person sees it (goal p50 < 300 ms);
- LLM stub's first token -> the first answer text a person can see: the reply carrying the card when the card
  was created with text (as it is: outbound.streaming creates it at the first text, holding it), else the first
  content update after that reply (goal p50 < 300 ms); and, of that, first token -> card.create at the stub;
- reaction at the stub -> the LLM stub's first token: how long before the card the receipt took the chat's token;
- card updates per second per card while it streams (the densest one-second window; Feishu allows 10);
- Feishu calls per reply (everything but token and bot-info reads), by route.

Where the time goes (two runs on the shared 2-core machine, load average ~5, PostgreSQL + Redis): receipt p50
~240-340 ms = two task hops through the broker (the event, then the turn) + routing and the context selection
before `started` runs. First token -> card with text seen p50 ~150-160 ms (p99 ~175-190): card.create leaves at
once (~10 ms after the first token; it takes only from the app's budget), then the reply carrying the card waits
for the chat's send budget, which the receipt spent ~65 ms (p50) before the first token (one token per 1/4.5 s,
so ~150 ms still to wait): that wait is most of the figure, the rest is two round trips. Before the card was created with its first text (empty,
then filled by an update that `send_budget_try` refused right after the reply took the token and that went at
the next token) the same figure was p50 ~390 ms at the same load; the card now carries the first words itself
(content updates per reply 2.8 -> 2.1-2.2, calls per reply 7.8 -> 7.1-7.2).
"""

import json
import os
import statistics
import time
from collections import Counter

from bench.bench_turns import _percentile, _setup, _start_worker, _use_own_database

TURNS = 20
STREAM_WORDS = 60
CHUNK_DELAY_SECONDS = 0.01
TURN_TIMEOUT_SECONDS = 60
READS = frozenset({"token", "bot_info", "chat_get", "get"})


def _bot(*, llm_url: str):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from agents.models import Bot, LLMModel, Provider

    call_command("migrate", verbosity=0, interactive=False)
    owner = get_user_model().objects.create(username="bench-streaming-owner")
    provider = Provider.objects.create(
        name="bench-stream", kind=Provider.Kind.OPENAI_CHAT, base_url=f"{llm_url}/v1", api_key="k", max_retries=0
    )
    model = LLMModel.objects.create(provider=provider, name="bench-model", context_window=32000)
    return Bot.objects.create(
        slug="bench-streaming",
        name="Bench",
        owner=owner,
        primary_model=model,
        feishu_app_id="cli_bench_streaming",
        feishu_app_secret="bench-app-secret",
        feishu_encrypt_key="bench-encrypt-key",
        feishu_verification_token="bench-verification-token",
        feishu_bot_open_id="ou_bench_bot",
    )


def _post(client, bot, *, index: int) -> float:
    """One @-mention through the webhook; the monotonic time its 200 came back."""
    from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload

    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id=f"om_bench_{index}",
        chat_id=f"oc_bench_{index}",
        text="@_user_1 tell me something",
        mentions=[mention_entry(index=1, open_id=bot.feishu_bot_open_id, name=bot.name)],
    )
    signed = event_request_build(payload=payload, encrypt_key=bot.feishu_encrypt_key)
    headers = {k: v for k, v in signed.django_headers().items() if k != "HTTP_CONTENT_TYPE"}
    response = client.post(f"/feishu/webhook/{bot.slug}/", data=signed.body, content_type="application/json", **headers)
    acknowledged = time.monotonic()
    if response.status_code != 200:
        raise RuntimeError(f"webhook answered {response.status_code}")
    return acknowledged


def _wait_delivered(*, message_id: str) -> None:
    from agents.models import Turn

    deadline = time.monotonic() + TURN_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        turn = Turn.objects.filter(source_message_id=message_id).first()
        if turn is not None and turn.finished_at is not None:
            if turn.status != Turn.Status.DELIVERED:
                raise RuntimeError(f"turn {turn.pk} ended {turn.status}: {turn.error}")
            return
        time.sleep(0.01)
    raise RuntimeError(f"the turn of {message_id} did not finish in {TURN_TIMEOUT_SECONDS} s")


def first_visible_at(writes: list) -> float:
    """When a person first sees answer text: the reply carrying the card lands, holding text from its creation
    (the streaming placeholder is not text), or else the first content update after the reply."""
    from feishu.outbound.cards import STREAMING_PLACEHOLDER  # after _setup, as every project import here

    [reply] = [r for r in writes if r.route == "reply" and r.status == 200]
    create = [r for r in writes if r.route == "card_create" and r.status == 200 and r.at < reply.at][-1]
    elements = json.loads(create.body["data"])["body"]["elements"]
    if any(e.get("content") not in ("", STREAMING_PLACEHOLDER) for e in elements):
        return reply.at
    return next(r.at for r in writes if r.route == "card_content" and r.status == 200 and r.at > reply.at)


def _measure(*, bot, feishu, llm) -> dict:
    from django.test import Client

    from tests.stubs.llm_servers import StubResponse, openai_chat_body

    client = Client(HTTP_HOST="localhost")  # an allowed host of the settings (not "testserver")
    answer = " ".join(f"word{n}" for n in range(STREAM_WORDS))
    receipt_ms, first_content_ms, card_created_ms, receipt_lead_ms = [], [], [], []
    updates_per_second, calls_per_reply = [], []
    routes: Counter[str] = Counter()
    for index in range(TURNS):
        llm.enqueue(
            "openai_chat", StubResponse(body=openai_chat_body(text=answer), chunk_delay_seconds=CHUNK_DELAY_SECONDS)
        )
        before = len(feishu.requests)
        acknowledged = _post(client, bot, index=index)
        _wait_delivered(message_id=f"om_bench_{index}")
        with feishu.lock:
            requests = feishu.requests[before:]
        writes = [r for r in requests if r.route not in READS]
        reaction = next(r for r in writes if r.route == "reaction_create")
        first_token = llm.first_chunk_at[-1]
        receipt_ms.append((reaction.at - acknowledged) * 1000)
        first_content_ms.append((first_visible_at(writes) - first_token) * 1000)
        card_created_ms.append((next(r for r in writes if r.route == "card_create").at - first_token) * 1000)
        receipt_lead_ms.append((first_token - reaction.at) * 1000)
        updates_per_second.append(feishu.max_per_second([r for r in writes if r.route.startswith("card_")]))
        calls_per_reply.append(len(writes))
        routes.update(r.route for r in writes)
        answered = [r for r in writes if r.route == "reply"]
        if len(answered) != 1 or json.loads(answered[0].body["content"]).get("type") != "card":
            raise RuntimeError("a reply was not exactly one card")
    return {
        "receipt": receipt_ms,
        "first_content": first_content_ms,
        "card_created": card_created_ms,
        "receipt_lead": receipt_lead_ms,
        "updates_per_second": updates_per_second,
        "calls": calls_per_reply,
        "routes": {route: count / TURNS for route, count in sorted(routes.items())},
    }


def run() -> None:
    if not os.environ.get("REDIS_URL"):
        print("skipped: set REDIS_URL (the bench measures through a real Celery worker)")
        return
    _setup()
    from django.conf import settings
    from django.db import connection
    from lark_oapi.core.cache import LocalCache
    from lark_oapi.core.token.manager import TokenManager

    from amuxweb.celery import app
    from tests.stubs.feishu_server import FeishuStubServer
    from tests.stubs.llm_servers import LLMStubServer

    original, database_url, cleanup = _use_own_database()
    llm = LLMStubServer().start()
    feishu_server = FeishuStubServer().start()
    settings.FEISHU_DOMAIN = feishu_server.url
    TokenManager.cache = LocalCache()
    os.environ["AMUX_TEST_FEISHU_DOMAIN"] = feishu_server.url  # the worker's Feishu is this stub
    saved_eager = app.conf.task_always_eager
    worker = None
    try:
        bot = _bot(llm_url=llm.url())
        app.conf.task_always_eager = False
        connection.close()  # the worker and this process share the database from here on
        worker, _log = _start_worker(database_url)
        result = _measure(bot=bot, feishu=feishu_server.stub, llm=llm)
        print(f"database: {connection.vendor}; {TURNS} @-mentions, one at a time, each in its own chat;")
        print(f"the model streams {STREAM_WORDS} words, one per {CHUNK_DELAY_SECONDS * 1000:.0f} ms")
        for label, key in (
            ("webhook 200 -> reaction at Feishu (ms)", "receipt"),
            ("LLM first token -> card with text seen (ms)", "first_content"),
            ("  of which first token -> card.create (ms)", "card_created"),
            ("reaction at Feishu -> first token (ms)", "receipt_lead"),
        ):
            values = result[key]
            print(f"{label:<46} p50 {_percentile(values, 0.5):8.1f}   p99 {_percentile(values, 0.99):8.1f}")
        print(
            f"{'card updates per second per card':<46} max {max(result['updates_per_second']):5d}"
            f"      mean {statistics.mean(result['updates_per_second']):5.1f}   (Feishu allows 10)"
        )
        print(f"{'Feishu calls per reply':<46} mean {statistics.mean(result['calls']):5.1f}")
        print("  by route: " + ", ".join(f"{route} {count:.1f}" for route, count in result["routes"].items()))
    finally:
        app.conf.task_always_eager = saved_eager
        os.environ.pop("AMUX_TEST_FEISHU_DOMAIN", None)
        if worker is not None:
            os.killpg(worker.pid, 15)
            worker.wait(timeout=30)
        feishu_server.stop()
        llm.stop()
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(original)
        cleanup()
