"""Seed 002 "验收标准" as one end-to-end story through the services the bridge and the turn call."""

from __future__ import annotations

import io

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.threadcontext.conftest import CHAT_ID, ROOT_ID
from tests.threadcontext.flows import CODER, PLANNER, answer, hub_restart, post, turn, workspace_for
from threadcontext.models import ThreadContextDecision, ThreadContextItem, ThreadEvent

GROUP = [PLANNER, CODER]


@pytest.mark.django_db(transaction=True)
def test_seed_002_acceptance_end_to_end():
    # built-in constants: retention 30 days, agent output 20000, context 24000 chars, 20 items by default
    assert (settings.AMUX_CONTEXT_RETENTION_DAYS, settings.AMUX_MAX_AGENT_OUTPUT_CHARS) == (30, 20000)
    assert (settings.AMUX_MAX_CONTEXT_CHARS, settings.AMUX_THREAD_CONTEXT_LIMIT) == (24000, 20)

    # given: Planner and Coder in one shared workspace group with the shared thread context on
    for bot in GROUP:
        assert workspace_for(bot).thread_context_limit == 20
    post("我想做一个 H5 贪吃蛇游戏", bots=GROUP, message_id=ROOT_ID)
    post("要支持手机触屏，别用外部库", bots=GROUP, sender_id="ou_bob", sender_name="Bob")

    # Planner answers over several rounds; every round is kept as agent_output
    turn("出一个方案", to=PLANNER, bots=GROUP)
    answer(PLANNER, "# H5 贪吃蛇游戏方案设计 v1", session_name="planner-h5")
    turn("加上计分规则", to=PLANNER, bots=GROUP)
    answer(PLANNER, "# 方案 v2：计分规则", session_name="planner-h5")
    assert ThreadEvent.objects.filter(bridge_id=PLANNER.bridge_id, event_type="agent_output").count() == 2

    # when: the hub restarts (new DB connection, freshly loaded modules) and Coder is @-ed
    hub_restart()
    coder = turn("根据上述方案，实现这个游戏", to=CODER, bots=GROUP)

    # then: Planner's multi-round output and the un-@ discussion reach Coder, labelled, oldest first
    assert [item.line for item in coder.package.selected] == [
        "Alice: 我想做一个 H5 贪吃蛇游戏",
        "Bob: 要支持手机触屏，别用外部库",
        "Alice: @Planner 出一个方案",
        "planner/planner-h5: # H5 贪吃蛇游戏方案设计 v1",
        "Alice: @Planner 加上计分规则",
        "planner/planner-h5: # 方案 v2：计分规则",
    ]
    assert coder.prompt.startswith("[Amux Feishu Thread Mode]\n")
    assert coder.prompt.endswith("[User request]\n根据上述方案，实现这个游戏")
    # the @ request is stored as user_request but is not in this turn's selected context
    assert ThreadEvent.objects.filter(
        bridge_id=CODER.bridge_id, event_type="user_request", text="根据上述方案，实现这个游戏"
    ).exists()
    assert not ThreadContextItem.objects.filter(bridge_id=CODER.bridge_id, text__contains="根据上述方案").exists()
    assert "根据上述方案" not in coder.decision.thread_context

    # a slash command injects nothing
    slash = turn("/new", to=CODER, bots=GROUP, is_slash_command=True)
    assert (slash.prompt, slash.package.selected) == ("/new", ())

    # explain shows the latest decision (the slash command's), and by id the Coder's real turn
    latest = io.StringIO()
    call_command("feishu_context_explain", ROOT_ID, "--profile", "coder", stdout=latest)
    by_id = io.StringIO()
    call_command("feishu_context_explain", ROOT_ID, "--decision-id", str(coder.decision.pk), "--verbose", stdout=by_id)
    assert f"decision_id:   {slash.decision.pk}\n" in latest.getvalue()
    assert "note:          slash command: no context is carried\n" in latest.getvalue()
    assert "selected items (6):" in by_id.getvalue()
    assert by_id.getvalue().endswith(f"prompt preview:\n{coder.prompt}\n")
    assert ThreadContextDecision.objects.filter(chat_id=CHAT_ID, bot_profile="coder").count() == 2
