"""Tools in whole turns (issue 15, M2, M3), end to end: a REST turn through the API and a Feishu @-mention
through the signed webhook, each run by the one turn pipeline (the task eager here), the real provider SDKs
against the LLM stub issuing tool calls in each wire format, the real SDK MCP stub server over stdio and HTTP.

What is proved here and not in test_tool_loop.py (which drives turn_tools_run directly): the rows a turn leaves,
that the reply is only the final answer, that tool activity reaches no thread-context item, no `/history` page,
no later turn's context and no other bot's prompt; that a hung server never hangs the turn; that the budget fits
the task's soft time limit (clamp and system check); per-bot limits; no secret in any API response or page.
"""

# ruff: noqa: F811 - the Feishu and probe fixtures are imported, then asked for by name

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.mcp.client import mcp_connection, mcp_connections_close_all
from agents.mcp.services import mcp_server_config
from agents.models import Bot, McpServer, Message, Thread, Turn, TurnToolCall
from agents.tools.budget import SOFT_LIMIT_MARGIN_SECONDS, budget_within_soft_limit, tool_budget_max_seconds
from agents.tools.checks import TOOL_BUDGET_OVER_SOFT_LIMIT, tool_budget_fits_the_soft_limit
from agents.tools.loop import FINAL_ANSWER_INSTRUCTION
from core.redaction import REDACTED as SECRET_MASK
from feishu.discuss.sweep import discuss_wakes_sweep
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory
from tests.agents.forms import bot_admin_form_data
from tests.agents.test_llm_adapters import APIS, MODEL_NAMES
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401 - shared fixtures
from tests.probe.conftest import make_judge  # noqa: F401 - fixture
from tests.stubs.llm_servers import (
    BODY_BUILDERS,
    StubResponse,
    anthropic_body,
    openai_chat_body,
)
from tests.stubs.mcp_server import http_server_running, stdio_command
from threadcontext.models import ThreadContextItem, ThreadEvent, Workspace

pytestmark = pytest.mark.django_db

# Markers that exist only inside tool activity: a tool's arguments and what it answered.
TOOL_ARGUMENT = "zebra-argument-5150"
TOOL_RESULT = f"echo: {TOOL_ARGUMENT}"
FINAL_ANSWER = "The sum is 42 and the docs agree."
SERVER_SECRET = "mcp-env-secret-31337"
HEADER_SECRET = "mcp-header-secret-27182"
# Starting the SDK stub server takes tens of seconds when 8 test runs share 2 cores.
CONNECT_TIMEOUT_SECONDS = 120.0
CHAT = "oc_team"


@pytest.fixture(autouse=True)
def _mcp_settings(settings) -> Iterator[None]:
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = CONNECT_TIMEOUT_SECONDS
    settings.AMUX_TOOL_CALL_TIMEOUT_SECONDS = 10.0
    yield
    mcp_connections_close_all()


def tool_model(llm_stub, *, api: str = "openai_chat", timeout_seconds: float = 30, max_retries: int = 0):
    provider = ProviderFactory(
        kind=api,
        base_url=llm_stub.url("/v1") if api.startswith("openai") else llm_stub.url(),
        api_key="sk-provider-key-1618",
        max_retries=max_retries,
        timeout_seconds=timeout_seconds,
    )
    return LLMModelFactory(provider=provider, name=MODEL_NAMES[api], supports_tool_calls=True)


def stdio_server(bot: Bot, *, allowed=("echo", "add"), environment=None, **fields) -> McpServer:
    command, args = stdio_command()
    return McpServer.objects.create(
        bot=bot,
        name="stub",
        transport=McpServer.Transport.STDIO,
        command=command,
        args=args,
        environment=json.dumps(environment or {"STUB_TOKEN": SERVER_SECRET}),
        allowed_tools=list(allowed),
        **fields,
    )


def http_server(bot: Bot, *, url: str, allowed=("echo",), headers=None, name="web", **fields) -> McpServer:
    return McpServer.objects.create(
        bot=bot,
        name=name,
        transport=McpServer.Transport.STREAMABLE_HTTP,
        url=url,
        headers=json.dumps(headers or {"X-Api-Key": HEADER_SECRET}),
        allowed_tools=list(allowed),
        **fields,
    )


def warmed(server: McpServer) -> McpServer:
    """Open the process's pooled connection to `server` now, so a turn's timing leaves the start-up out."""
    mcp_connection(config=mcp_server_config(server=server))
    return server


def rest_setup(llm_stub, *, api: str = "openai_chat", **model_kwargs) -> tuple[APIClient, Bot, Thread]:
    owner = UserFactory(username="owner")
    bot = BotFactory(owner=owner, name="Coder", primary_model=tool_model(llm_stub, api=api, **model_kwargs))
    thread = ThreadFactory(bot=bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=owner).key}")
    return client, bot, thread


def rest_say(client: APIClient, thread: Thread, text: str) -> dict:
    """One REST message; the eager task runs its turn before the response; the turn as the API shows it."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": text}, format="json")
    assert response.status_code == 202, response.content
    return client.get(f"/api/v1/turns/{response.json()['turn_id']}/").json()


def tool_rows(turn_id: int) -> list[tuple]:
    return list(TurnToolCall.objects.filter(turn_id=turn_id).values_list("step", "index", "server", "tool", "status"))


def tool_script(api: str) -> list[StubResponse]:
    """Two steps of tool calls (two calls, then one), then the final answer."""
    body = BODY_BUILDERS[api]
    return [
        StubResponse(body=body(tool_calls=[("stub__echo", {"text": TOOL_ARGUMENT}), ("stub__add", {"a": 2, "b": 40})])),
        StubResponse(body=body(tool_calls=[("stub__echo", {"text": "again"})])),
        StubResponse(body=body(text=FINAL_ANSWER)),
    ]


# --- 1 + 2: a REST turn that calls tools; nothing of it outside its TurnToolCall rows ------------------------


@pytest.mark.parametrize("api", APIS)
def test_m2_m3_a_rest_turn_calls_tools_in_order_and_only_its_final_answer_is_seen_later(api, llm_stub):
    # given: a bot with the stub server; the model calls echo and add, then echo, then answers
    client, bot, thread = rest_setup(llm_stub, api=api)
    stdio_server(bot)
    llm_stub.enqueue(api, *tool_script(api))

    # when
    turn = rest_say(client, thread, "What is 2 + 40?")

    # then: delivered, the reply is the final answer, the calls are recorded in order
    assert (turn["status"], turn["attempts"], turn["error"]) == ("delivered", 1, "")
    assert turn["reply"]["content"] == FINAL_ANSWER
    assert tool_rows(turn["id"]) == [
        (1, 0, "stub", "echo", "ok"),
        (1, 1, "stub", "add", "ok"),
        (2, 0, "stub", "echo", "ok"),
    ]
    assert list(TurnToolCall.objects.filter(turn_id=turn["id"]).values_list("result", flat=True)) == [
        TOOL_RESULT,
        "42",
        "echo: again",
    ]
    assert len(llm_stub.requests_for(api)) == 3
    # and /history and the context API hold the two messages, nothing of the tools
    history = client.get(f"/api/v1/threads/{thread.pk}/history/").json()["results"]
    assert [(m["kind"], m["content"]) for m in history] == [
        ("agent_reply", FINAL_ANSWER),
        ("user_message", "What is 2 + 40?"),
    ]
    context = client.get(f"/api/v1/threads/{thread.pk}/context/").json()["results"]
    assert [m["content"] for m in context] == ["What is 2 + 40?", FINAL_ANSWER]
    assert Message.objects.filter(thread=thread).count() == 2
    assert TOOL_ARGUMENT not in json.dumps(turn)

    # when: the next turn of the thread, answered without tools
    llm_stub.reset()
    llm_stub.enqueue(api, StubResponse(body=BODY_BUILDERS[api](text="You are welcome.")))
    rest_say(client, thread, "Thanks")

    # then: its model input carried the previous question and final answer, no tool call and no tool result
    (request,) = llm_stub.requests_for(api)
    wire = request.body.decode()
    assert FINAL_ANSWER in wire and "What is 2 + 40?" in wire
    assert TOOL_ARGUMENT not in wire and "echo: again" not in wire
    assert "tool_call_id" not in wire and "tool_use" not in wire and "functionResponse" not in wire
    assert "function_call_output" not in wire


# --- 1 + 2: a Feishu @-mention turn that calls tools ----------------------------------------------------------


def say_to_all(feishu, bots, *, text, message_id, mention=(), root="", chat_id=CHAT):  # noqa: F811
    """One Feishu message, pushed to every bot app in the chat (as Feishu does)."""
    topic = {"root_id": root, "thread_id": f"omt_{root}", "parent_id": root} if root else {}
    for bot in bots:
        response, _ = feishu.say(bot, text=text, message_id=message_id, chat_id=chat_id, mention=list(mention), **topic)
        assert response.status_code == 200


@pytest.fixture
def team(feishu, make_feishu_bot, llm_stub):  # noqa: F811
    """Planner answers through tools (OpenAI chat at the stub); Coder on the offline local_rules echo."""
    planner = make_feishu_bot(slug="planner", name="Planner", primary_model=tool_model(llm_stub))
    coder = make_feishu_bot(slug="coder", name="Coder")
    for bot in (planner, coder):
        Workspace.objects.create(bot_profile=bot.slug, chat_id=CHAT, shared_thread_enabled=True)
    stdio_server(planner)
    return planner, coder


def test_m2_m3_a_feishu_turn_calls_tools_and_no_other_bot_nor_later_turn_sees_them(feishu, team, llm_stub):  # noqa: F811
    # given: a topic; Planner is @-ed and answers through two tool steps
    planner, coder = team
    bots = [planner, coder]
    say_to_all(feishu, bots, text="We need the sum for the report", message_id="om_root")
    llm_stub.enqueue("openai_chat", *tool_script("openai_chat"))

    # when
    say_to_all(feishu, bots, text="compute it", message_id="om_p1", mention=[planner], root="om_root")

    # then: one delivered turn, its calls in order, the reply posted to Feishu is the final answer only
    turn = Turn.objects.get(bot=planner, source_message_id="om_p1")
    assert (turn.status, turn.reply_message.content) == ("delivered", FINAL_ANSWER)
    assert tool_rows(turn.pk) == [
        (1, 0, "stub", "echo", "ok"),
        (1, 1, "stub", "add", "ok"),
        (2, 0, "stub", "echo", "ok"),
    ]
    # (what a person reads: the card's markdown as it shows now; every call the stub saw, card updates included)
    assert feishu.stub.sent_texts(app_id=planner.feishu_app_id) == [FINAL_ANSWER]
    assert TOOL_ARGUMENT not in json.dumps([request.body for request in feishu.stub.requests], default=str)
    # and the thread context holds the final answer as Planner's agent_output, nothing of its tools (C3)
    items = list(ThreadContextItem.objects.values_list("item_type", "text"))
    assert ("agent_output", FINAL_ANSWER) in items
    stored = json.dumps(items) + json.dumps(list(ThreadEvent.objects.values_list("text", flat=True)))
    assert TOOL_ARGUMENT not in stored and "echo: again" not in stored

    # when: Coder is @-ed in the topic, then Planner again
    say_to_all(feishu, bots, text="implement it", message_id="om_c1", mention=[coder], root="om_root")
    llm_stub.reset()
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Noted.")))
    say_to_all(feishu, bots, text="anything else?", message_id="om_p2", mention=[planner], root="om_root")

    # then: Coder's thread-context prompt has Planner's answer and none of its tool activity
    coder_prompt = Turn.objects.get(bot=coder, source_message_id="om_c1").user_message.prompt
    assert f"planner: {FINAL_ANSWER}" in coder_prompt
    assert TOOL_ARGUMENT not in coder_prompt and "echo: again" not in coder_prompt
    # and Planner's next turn got its previous answer as context, not its tool calls or results
    (request,) = llm_stub.requests_for("openai_chat")
    wire = request.body.decode()
    assert FINAL_ANSWER in wire
    assert TOOL_ARGUMENT not in wire and "tool_call_id" not in wire
    assert Turn.objects.get(bot=planner, source_message_id="om_p2").status == "delivered"


def test_m3_the_discuss_judge_of_a_tool_bot_gets_only_decide_and_no_tool_activity(
    feishu,
    make_feishu_bot,
    make_judge,
    llm_stub,
    django_capture_on_commit_callbacks,  # noqa: F811
):
    # given: a discuss bot with tools that answered an @-mention through a tool call
    bot = make_feishu_bot(
        name="Planner",
        primary_model=tool_model(llm_stub),
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id=CHAT)
    stdio_server(bot)
    llm_stub.enqueue("openai_chat", *tool_script("openai_chat"))
    feishu.say(bot, text="compute the sum", chat_id=CHAT, mention=[bot], message_id="om_m1")
    assert Turn.objects.get(bot=bot).reply_message.content == FINAL_ANSWER
    # when: an un-@ message wakes the judge
    llm_stub.enqueue(
        "anthropic", StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "skip", "reason": "no"})]))
    )
    feishu.say(bot, text="what do we do next?", chat_id=CHAT, message_id="om_m2")
    with django_capture_on_commit_callbacks(execute=True):
        discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    # then: the judge was offered exactly `decide`, and its transcript holds no tool activity
    (judge,) = llm_stub.requests_for("anthropic")
    assert [tool["name"] for tool in judge.json["tools"]] == ["decide"]
    assert TOOL_ARGUMENT not in judge.body.decode() and "echo: again" not in judge.body.decode()
    assert "stub__" not in judge.body.decode()


# --- 4: a hung server never hangs the turn ----------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "streamable_http"])
def test_m2_a_hung_tool_over_stdio_and_http_times_out_and_the_turn_is_delivered(transport, llm_stub, settings):
    # given: the hang tool sleeps 600 s; one call may take 3 s
    settings.AMUX_TOOL_CALL_TIMEOUT_SECONDS = 3.0
    client, bot, thread = rest_setup(llm_stub)
    running = http_server_running() if transport == "streamable_http" else contextlib.nullcontext("")
    with running as url:
        server = warmed(http_server(bot, url=url, allowed=("hang",)) if url else stdio_server(bot, allowed=("hang",)))
        llm_stub.enqueue(
            "openai_chat", StubResponse(body=openai_chat_body(tool_calls=[(f"{server.name}__hang", {"seconds": 600})]))
        )
        llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="It hung; here is what I know.")))

        # when
        started = time.monotonic()
        turn = rest_say(client, thread, "try the slow tool")
        elapsed = time.monotonic() - started

    # then: the call timed out at its timeout, the model was told, the turn delivered its answer
    row = TurnToolCall.objects.get(turn_id=turn["id"])
    assert (row.tool, row.status, row.error) == ("hang", "timeout", f"{server.name}: tool 'hang' timed out")
    assert 3000 <= row.duration_ms < 8000
    assert (turn["status"], turn["reply"]["content"]) == ("delivered", "It hung; here is what I know.")
    second = llm_stub.requests_for("openai_chat")[1].json
    assert second["messages"][-1]["content"] == f"Tool '{server.name}__hang' failed: {row.error}"
    assert elapsed < 90  # the call's 3 s and two model calls on a loaded machine; never the tool's 600 s


class SilentListener:
    """A TCP port that accepts connections and never answers: an HTTP MCP server hung before its handshake."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.accepted: list[socket.socket] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted.append(connection)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}/mcp"

    def close(self) -> None:
        for connection in self.accepted:
            connection.close()
        # close() alone leaves the accepting thread blocked in accept() for ever; shutdown() wakes it (Linux).
        self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()
        self._accepting.join(timeout=5)


@pytest.mark.parametrize("transport", ["stdio", "streamable_http"])
def test_m2_a_server_hung_at_its_handshake_is_recorded_and_the_turn_goes_on(transport, llm_stub, settings):
    # given: a server that starts (or accepts) and never answers; connecting may take 3 s
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = 3.0
    client, bot, thread = rest_setup(llm_stub)
    listener = SilentListener()
    try:
        if transport == "stdio":
            McpServer.objects.create(
                bot=bot, name="mute", command="/bin/sleep", args=["600"], allowed_tools=["anything"]
            )
        else:
            http_server(bot, url=listener.url, allowed=("anything",), name="mute")

        # when
        started = time.monotonic()
        turn = rest_say(client, thread, "hello")
        elapsed = time.monotonic() - started
    finally:
        listener.close()

    # then: a step-0 row says why, the model answered without that server's tools, within the connect timeout
    row = TurnToolCall.objects.get(turn_id=turn["id"])
    assert (row.step, row.server, row.tool, row.status) == (0, "mute", "(connect)", "error")
    assert row.error == "mute: the server did not answer within 3 s"
    assert (turn["status"], turn["reply"]["content"]) == ("delivered", "stub reply")
    (request,) = llm_stub.requests_for("openai_chat")
    assert "tools" not in request.json
    assert elapsed < 60  # the 3 s connect timeout on a loaded machine; never the server's 600 s sleep


# --- 4: the budget fits the task's soft time limit --------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "soft_limit", "elapsed", "final_call", "fitted"),
    [
        (120.0, None, 0.0, 180.0, 120.0),  # no soft limit: nothing to fit
        (120.0, 240.0, 0.0, 60.0, 120.0),  # room enough: the budget stands
        (120.0, 240.0, 0.0, 180.0, 55.0),  # a provider's 60 s x 3 attempts: 240 - 180 - 5
        (120.0, 240.0, 20.5, 180.0, 34.0),  # connecting took 20.5 s: whole seconds, rounded down
        (120.0, 240.0, 0.0, 300.0, 0.0),  # the final call alone may outlast the limit: no tool step at all
        (2.5, 240.0, 0.0, 10.0, 2.5),  # a smaller budget is kept exactly
    ],
)
def test_m2_the_tool_budget_is_fitted_to_the_soft_limit(budget, soft_limit, elapsed, final_call, fitted):
    assert SOFT_LIMIT_MARGIN_SECONDS == 5.0
    assert (
        budget_within_soft_limit(
            budget_seconds=budget, soft_limit_seconds=soft_limit, elapsed_seconds=elapsed, final_call_seconds=final_call
        )
        == fitted
    )


def test_m2_a_turn_whose_final_answer_needs_all_the_soft_limit_runs_no_tool_step(llm_stub, settings, caplog):
    # given: a 40 s soft limit and a provider whose one call may take 20 s x 2 attempts
    settings.CELERY_TASK_SOFT_TIME_LIMIT = 40
    client, bot, thread = rest_setup(llm_stub, timeout_seconds=20, max_retries=1)
    stdio_server(bot)

    # when
    with caplog.at_level(logging.INFO, logger="agents.tools.turn_tools"):
        turn = rest_say(client, thread, "What is 2 + 40?")

    # then: one model call, without tools, told that the time budget (fitted to 0 s) is used up
    (request,) = llm_stub.requests_for("openai_chat")
    assert "tools" not in request.json
    assert request.json["messages"][-1]["content"].endswith(
        FINAL_ANSWER_INSTRUCTION.format(reason="the time budget of 0 s")
    )
    assert (turn["status"], tool_rows(turn["id"])) == ("delivered", [])
    [record] = [r for r in caplog.records if r.getMessage() == "tool budget fitted to the soft time limit"]
    assert (record.budget_seconds, record.fitted_seconds) == (120.0, 0.0)


def test_m2_a_fitted_budget_cuts_a_hung_tool_before_the_soft_limit(llm_stub, settings):
    # given: a 30 s soft limit, a provider call of at most 10 s: at most 15 s of tools, whatever the bot asks
    settings.CELERY_TASK_SOFT_TIME_LIMIT = 30
    settings.AMUX_TOOL_CALL_TIMEOUT_SECONDS = 600.0
    client, bot, thread = rest_setup(llm_stub, timeout_seconds=10)
    warmed(stdio_server(bot, allowed=("hang",), call_timeout_seconds=600.0))
    Bot.objects.filter(pk=bot.pk).update(tool_time_budget_seconds=300.0)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__hang", {"seconds": 600})])))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Out of time.")))

    # when
    started = time.monotonic()
    turn = rest_say(client, thread, "slow one")
    elapsed = time.monotonic() - started

    # then: the hung call was cut at the fitted budget, the final answer still came, all inside the soft limit
    row = TurnToolCall.objects.get(turn_id=turn["id"])
    assert row.status == "timeout"
    final = llm_stub.requests_for("openai_chat")[-1].json
    reason = final["messages"][-1]["content"].rsplit("(", 1)[1].split(")")[0]
    fitted = float(reason.removeprefix("the time budget of ").removesuffix(" s"))
    assert 0 < fitted <= 30 - 10 - SOFT_LIMIT_MARGIN_SECONDS
    assert row.duration_ms <= fitted * 1000 + 3000  # the SDK's timeout fires at the budget's end
    assert (turn["status"], turn["reply"]["content"]) == ("delivered", "Out of time.")
    assert elapsed < 30  # the whole turn inside the soft limit


def test_m2_the_system_check_refuses_a_hub_budget_that_leaves_no_final_answer(settings):
    # given: a 240 s soft limit, 20 s to connect
    settings.CELERY_TASK_SOFT_TIME_LIMIT = 240
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = 20.0
    settings.AMUX_TOOL_TIME_BUDGET_SECONDS = 120.0
    assert tool_budget_fits_the_soft_limit() == []
    # when: the budget takes all of it
    settings.AMUX_TOOL_TIME_BUDGET_SECONDS = 230.0
    [error] = tool_budget_fits_the_soft_limit()
    # then: an error naming the settings; `manage.py check` (every start) refuses to go on
    assert error.id == TOOL_BUDGET_OVER_SOFT_LIMIT
    assert error.msg == (
        "AMUX_TOOL_TIME_BUDGET_SECONDS (230) + AMUX_TOOL_CONNECT_TIMEOUT_SECONDS (20) + 5 s leave no time for the "
        "final answer within CELERY_TASK_SOFT_TIME_LIMIT (240)."
    )
    with pytest.raises(SystemCheckError, match=TOOL_BUDGET_OVER_SOFT_LIMIT):
        call_command("check")


# --- 6: per-bot limits ------------------------------------------------------------------------------------------


def echo_for_ever(request) -> StubResponse:
    if "tools" not in request.json:
        return StubResponse(body=openai_chat_body(text="Stopped."))
    return StubResponse(body=openai_chat_body(tool_calls=[("stub__echo", {"text": "again"})]))


@pytest.mark.parametrize(
    ("hub_steps", "bot_steps", "server_steps", "steps_run"),
    [
        (8, 1, None, 1),  # the bot tightens the hub's
        (1, 3, None, 3),  # the bot may also allow more than the hub's default
        (8, 3, 2, 2),  # a server tightens the bot's
    ],
)
def test_m2_the_step_limit_is_the_bots_own_tightened_by_its_servers(
    hub_steps, bot_steps, server_steps, steps_run, llm_stub, settings
):
    # given: a model that would call tools for ever
    settings.AMUX_TOOL_MAX_STEPS = hub_steps
    client, bot, thread = rest_setup(llm_stub)
    Bot.objects.filter(pk=bot.pk).update(tool_max_steps=bot_steps)
    stdio_server(bot, max_steps=server_steps)
    llm_stub.respond_with("openai_chat", echo_for_ever)

    # when
    turn = rest_say(client, thread, "loop")

    # then: that many tool steps, then the final answer without tools
    bodies = [request.json for request in llm_stub.requests_for("openai_chat")]
    assert ["tools" in body for body in bodies] == [True] * steps_run + [False]
    assert bodies[-1]["messages"][-1]["content"].endswith(
        FINAL_ANSWER_INSTRUCTION.format(reason=f"at most {steps_run} tool steps")
    )
    assert [row[0] for row in tool_rows(turn["id"])] == list(range(1, steps_run + 1))
    assert turn["reply"]["content"] == "Stopped."


def test_m2_the_bots_call_timeout_overrides_the_hubs(llm_stub, settings):
    # given: the hub allows 30 s per call, the bot only 2 s
    settings.AMUX_TOOL_CALL_TIMEOUT_SECONDS = 30.0
    client, bot, thread = rest_setup(llm_stub)
    Bot.objects.filter(pk=bot.pk).update(tool_call_timeout_seconds=2.0)
    stdio_server(bot, allowed=("hang",))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(tool_calls=[("stub__hang", {"seconds": 20})])))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Too slow.")))

    # when
    turn = rest_say(client, thread, "slow")

    # then
    row = TurnToolCall.objects.get(turn_id=turn["id"])
    assert (row.status, turn["reply"]["content"]) == ("timeout", "Too slow.")
    assert 2000 <= row.duration_ms < 6000


@pytest.mark.parametrize(
    ("field", "value", "saved"),
    [
        ("tool_max_steps", "3", 3),
        ("tool_time_budget_seconds", "60", 60.0),
        ("tool_call_timeout_seconds", "5", 5.0),
    ],
)
def test_m2_the_bot_admin_saves_its_tool_limits(admin_client, field, value, saved):
    bot = BotFactory()
    response = admin_client.post(
        reverse("admin:agents_bot_change", args=[bot.pk]), bot_admin_form_data(bot, **{field: value})
    )
    assert response.status_code == 302
    bot.refresh_from_db()
    assert getattr(bot, field) == saved


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool_max_steps", "0"),
        ("tool_max_steps", "51"),
        ("tool_time_budget_seconds", "0.5"),
        ("tool_time_budget_seconds", "236"),  # 240 - 20 s to connect - 5: over the soft limit
        ("tool_call_timeout_seconds", "1000"),
    ],
)
def test_m2_the_bot_admin_refuses_tool_limits_the_soft_limit_cannot_hold(admin_client, settings, field, value):
    settings.CELERY_TASK_SOFT_TIME_LIMIT = 240
    settings.AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = 20.0
    assert tool_budget_max_seconds() == 215.0
    bot = BotFactory()
    response = admin_client.post(
        reverse("admin:agents_bot_change", args=[bot.pk]), bot_admin_form_data(bot, **{field: value})
    )
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    bot.refresh_from_db()
    assert getattr(bot, field) is None


# --- 5: no secret of a server's configuration anywhere a person or a model reads --------------------------------


def test_m2_no_server_secret_in_a_prompt_a_log_line_an_api_response_or_a_record(llm_stub, caplog, admin_client):
    # given: a stdio server whose tool leaks its environment, an HTTP server whose tool echoes its header
    client, bot, thread = rest_setup(llm_stub)
    stdio_server(bot, allowed=("env_value",))
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(
            body=openai_chat_body(
                tool_calls=[
                    ("stub__env_value", {"name": "STUB_TOKEN"}),
                    ("web__header_value", {"name": "x-api-key"}),
                ]
            )
        ),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="I looked everything up.")))

    # when
    with http_server_running() as url, caplog.at_level(logging.DEBUG):
        http_server(bot, url=url, allowed=("header_value",))
        turn = rest_say(client, thread, "show me your configuration")
        pages = [
            client.get(f"/api/v1/threads/{thread.pk}/history/").content,
            client.get(f"/api/v1/threads/{thread.pk}/context/").content,
            client.get(f"/api/v1/turns/{turn['id']}/").content,
            admin_client.get(reverse("admin:agents_turn_change", args=[turn["id"]])).content,
            admin_client.get(reverse("admin:agents_mcpserver_changelist")).content,
        ]
        for server in McpServer.objects.filter(bot=bot):
            pages.append(admin_client.get(reverse("admin:agents_mcpserver_change", args=[server.pk])).content)

    # then: the tools ran, and the model saw masks where the secrets were
    assert tool_rows(turn["id"]) == [
        (1, 0, "stub", "env_value", "ok"),
        (1, 1, "web", "header_value", "ok"),
    ]
    second = llm_stub.requests_for("openai_chat")[1].json
    assert [message["content"] for message in second["messages"][-2:]] == [
        f"STUB_TOKEN={SECRET_MASK}",
        f"x-api-key={SECRET_MASK}",
    ]
    wire = b"".join(request.body for request in llm_stub.requests).decode()
    records = json.dumps(list(TurnToolCall.objects.values()), default=str)
    model_input = json.dumps(list(Turn.objects.values_list("model_input", flat=True)))
    for secret in (SERVER_SECRET, HEADER_SECRET):
        assert secret not in wire
        assert secret not in caplog.text
        assert secret not in records and secret not in model_input
        for page in pages:
            assert secret.encode() not in page
