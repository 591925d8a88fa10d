"""Approval round trip (issue 26, H1): from a person's press on the approval card to the tool call starting.

Each round: a signed @-mention through the webhook (lark-oapi verifies it), the turn (eager: the task runs in this
process) pauses on a gated `counter` call of the MCP stub over HTTP and posts its card to the Feishu stub; then the
press is posted as Feishu posts a `card.action.trigger` callback. Measured: press sent → the tool call starts
(the TurnToolCall's recorded end minus its duration), i.e. the callback's verification, the decision row, the
enqueue, the claim, the replay of the loop's state and the gate, without the model's time (the LLM stub answers
at once; the resume makes no model call before the tool runs). The press's HTTP answer time is reported beside
it (with eager tasks it includes the whole resumed turn: the model's final answer and the delivery). A real worker
adds the broker's pickup (bench_turns measures that separately).
"""

import logging
import os
import secrets
import statistics
import time

import django

ROUNDS = 30


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    django.setup()
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's host ("testserver") is allowed
    logging.disable(logging.INFO)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * fraction), len(ordered) - 1)]


def _round(client, bot, llm, stub, index: int) -> tuple[float, float]:
    from django.test import TestCase

    from agents.models import ToolApproval, TurnToolCall
    from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload
    from tests.feishu.test_approval_cards import card_payload
    from tests.stubs.llm_servers import StubResponse, openai_chat_body

    def post(payload):
        request = event_request_build(payload=payload, encrypt_key=bot.feishu_encrypt_key)
        headers = {k: v for k, v in request.django_headers().items() if k != "HTTP_CONTENT_TYPE"}
        with TestCase.captureOnCommitCallbacks(execute=True):
            return client.post(
                f"/feishu/webhook/{bot.slug}/", data=request.body, content_type="application/json", **headers
            )

    llm.enqueue(
        "openai_chat",
        StubResponse(body=openai_chat_body(tool_calls=[("ops__counter", {})])),
        StubResponse(body=openai_chat_body(text="done")),
    )
    message_id = f"om_bench_{index}_{secrets.token_hex(4)}"
    mention = [mention_entry(index=1, open_id=f"ou_bot_{bot.feishu_app_id}", name=bot.name)]
    said = post(
        message_event_payload(
            verification_token=bot.feishu_verification_token,
            app_id=bot.feishu_app_id,
            message_id=message_id,
            chat_id="oc_bench",
            text="@_user_1 count",
            sender_open_id="ou_alice",
            mentions=mention,
        )
    )
    approval = ToolApproval.objects.filter(turn__source_message_id=message_id).first()
    if approval is None:
        from agents.models import Turn

        raise RuntimeError(
            f"no approval: {said.status_code} {said.content!r} {list(Turn.objects.values_list('status', 'error'))}"
        )
    payload = card_payload(
        bot, approval_id=approval.pk, decision="allow_once", operator="ou_alice", message_id=approval.card_message_id
    )
    from django.utils import timezone

    pressed = timezone.now()
    started = time.perf_counter()
    response = post(payload)
    answered_ms = (time.perf_counter() - started) * 1000
    assert response.status_code == 200 and response.json()["toast"]["type"] == "success", response.content
    call = TurnToolCall.objects.get(turn=approval.turn)
    tool_started = call.created_at.timestamp() - call.duration_ms / 1000
    return (tool_started - pressed.timestamp()) * 1000, answered_ms


def run() -> None:
    _setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from agents.mcp.client import mcp_connections_close_all
    from agents.models import Bot, LLMModel, McpServer, Provider
    from amuxweb.celery import app
    from bench.bench_turns import _use_own_database
    from feishu.outbound import client as feishu_client
    from tests.stubs.feishu_server import FeishuStubServer
    from tests.stubs.llm_servers import LLMStubServer
    from tests.stubs.mcp_server import http_server_running
    from threadcontext.models import Workspace

    original, _url, cleanup = _use_own_database()
    llm, feishu = LLMStubServer().start(), FeishuStubServer().start()
    saved_eager, app.conf.task_always_eager = app.conf.task_always_eager, True
    from django.conf import settings

    saved_domain, settings.FEISHU_DOMAIN = settings.FEISHU_DOMAIN, feishu.url
    feishu_client._clients.clear()
    try:
        with http_server_running() as mcp_url:
            call_command("migrate", verbosity=0, interactive=False)
            owner = get_user_model().objects.create(username="bench-owner")
            provider = Provider.objects.create(
                name="stub", kind="openai_chat", base_url=llm.url("/v1"), api_key="k", max_retries=0
            )
            model = LLMModel.objects.create(provider=provider, name="gpt-4o-mini", supports_tool_calls=True)
            bot = Bot.objects.create(
                slug="bench-approvals",
                name="Ops",
                owner=owner,
                primary_model=model,
                feishu_app_id="cli_bench_approvals",
                feishu_app_secret="secret",
                feishu_encrypt_key="encrypt-key",
                feishu_verification_token="verification-token",
            )
            Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_bench")
            McpServer.objects.create(
                bot=bot,
                name="ops",
                transport="streamable_http",
                url=mcp_url,
                allowed_tools=["counter"],
                approval_tools=["counter"],
            )
            client = Client()
            _round(client, bot, llm, feishu.stub, -1)  # warm: the MCP connection, the SDK clients, the token
            results = [_round(client, bot, llm, feishu.stub, index) for index in range(ROUNDS)]
            mcp_connections_close_all()
        to_tool = [r[0] for r in results]
        answered = [r[1] for r in results]
        print(f"database: {connection.vendor}; {ROUNDS} rounds, eager tasks; load: {os.getloadavg()[0]:.2f}")
        print(
            f"press -> tool call starts: p50 {statistics.median(to_tool):.1f} ms, p95 {_percentile(to_tool, 0.95):.1f} ms"
        )
        print(
            f"press answered (eager: incl. the resumed turn): p50 {statistics.median(answered):.1f} ms, "
            f"p95 {_percentile(answered, 0.95):.1f} ms"
        )
    finally:
        app.conf.task_always_eager = saved_eager
        settings.FEISHU_DOMAIN = saved_domain
        feishu.stop()
        llm.stop()
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(original)
        cleanup()
