"""The thin selector over the store (C5): one bounded query, cross-bridge visibility, settings."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.threadcontext.conftest import CHAT_ID, CODER, PLANNER, ROOT_ID, inbound, workspace_create
from threadcontext.candidates import RULED_OUT_LIMIT
from threadcontext.models import ThreadContextItem, ThreadEvent, Workspace
from threadcontext.selectors import (
    ContextRequest,
    context_item_text_get,
    context_package_build,
    topic_root_text_get,
)
from threadcontext.services import thread_event_record_agent_output, thread_event_record_inbound
from threadcontext.trimming import EXCLUDED_ITEM_LIMIT, EXCLUDED_NOT_IN_MODE, EXCLUDED_OWN_OUTPUT

pytestmark = pytest.mark.django_db


def build(workspace: Workspace, bot: dict = CODER, *, message_id: str = "om_request", **overrides):
    values = {
        "workspace": workspace,
        "bridge_id": bot["bridge_id"],
        "bot_profile": bot["bot_profile"],
        "chat_id": CHAT_ID,
        "root_msg_id": ROOT_ID,
        "message_id": message_id,
        "request_text": "go",
    }
    values.update(overrides)
    return context_package_build(request=ContextRequest(**values))


def output(bot: dict, message_id: str, text: str, root_msg_id: str = ROOT_ID) -> None:
    thread_event_record_agent_output(
        **bot, chat_id=CHAT_ID, root_msg_id=root_msg_id, message_id=message_id, text=text, session_name="s"
    )


def bulk_items(count: int, *, bridge_id: str, item_type: str, start: int = 0) -> None:
    events = ThreadEvent.objects.bulk_create(
        ThreadEvent(
            chat_id=CHAT_ID,
            root_msg_id=ROOT_ID,
            message_id=f"om_bulk_{bridge_id}_{start + index}",
            event_type=item_type,
            bridge_id=bridge_id,
            bot_profile=bridge_id,
            text=f"m{start + index}",
        )
        for index in range(count)
    )
    ThreadContextItem.objects.bulk_create(
        ThreadContextItem(
            event=event,
            chat_id=CHAT_ID,
            root_msg_id=ROOT_ID,
            bridge_id=bridge_id,
            message_id=event.message_id,
            item_type=item_type,
            author_label=bridge_id,
            text=event.text,
        )
        for event in events
    )


@pytest.mark.parametrize("thread_length", [5, 300])
def test_c5_selection_is_one_query_whatever_the_thread_length(thread_length):
    # given
    workspace = workspace_create(CODER)
    bulk_items(thread_length, bridge_id=CODER["bridge_id"], item_type="human_message")
    # when
    with CaptureQueriesContext(connection) as queries:
        package = build(workspace)
    # then
    assert len(queries.captured_queries) == 1
    assert len(package.selected) == min(thread_length, 20)


def test_c5_many_own_outputs_newer_than_the_discussion_do_not_crowd_it_out():
    # given: 5 human messages, then 100 of this bot's own outputs (more than any LIMIT slack)
    workspace = workspace_create(CODER)
    bulk_items(5, bridge_id=CODER["bridge_id"], item_type="human_message")
    bulk_items(100, bridge_id=CODER["bridge_id"], item_type="agent_output")
    # when
    package = build(workspace)
    # then: every eligible item is still found, and the newest own outputs are explained
    assert [item.text for item in package.selected] == ["m0", "m1", "m2", "m3", "m4"]
    own = [item for item in package.excluded if item.reason == EXCLUDED_OWN_OUTPUT]
    assert len(own) == RULED_OUT_LIMIT


def test_c5_item_limit_comes_from_the_workspace():
    workspace = workspace_create(CODER, thread_context_limit=3)
    bulk_items(10, bridge_id=CODER["bridge_id"], item_type="human_message")
    package = build(workspace)
    assert [item.text for item in package.selected] == ["m7", "m8", "m9"]
    assert [item.reason for item in package.excluded] == [EXCLUDED_ITEM_LIMIT, EXCLUDED_ITEM_LIMIT]


def test_c5_other_bots_outputs_are_visible_across_bridge_ids_and_own_are_not():
    workspace = workspace_create(CODER)
    output(PLANNER, "om_p1", "planner says")
    output(CODER, "om_c1", "coder says")
    package = build(workspace)
    assert [item.line for item in package.selected] == ["planner/s: planner says"]
    assert [(item.source, item.reason) for item in package.excluded] == [("coder/s", EXCLUDED_OWN_OUTPUT)]


def test_c5_human_messages_recorded_by_several_bridges_are_selected_once():
    coder_workspace = workspace_create(CODER)
    planner_workspace = workspace_create(PLANNER)
    for bot, workspace in ((PLANNER, planner_workspace), (CODER, coder_workspace)):
        thread_event_record_inbound(message=inbound(bot, "hello both", message_id="om_h"), workspace=workspace)
    package = build(coder_workspace)
    assert [item.line for item in package.selected] == ["Alice: hello both"]
    assert package.excluded == ()


def test_c5_other_threads_and_chats_never_leak_in():
    workspace = workspace_create(CODER)
    output(PLANNER, "om_other_root", "elsewhere", root_msg_id="om_other_root")
    thread_event_record_agent_output(
        **PLANNER, chat_id="oc_other_chat", root_msg_id=ROOT_ID, message_id="om_other_chat", text="other chat"
    )
    assert build(workspace).selected == ()


def test_c9_shared_thread_disabled_selects_nothing():
    workspace = workspace_create(CODER, shared_thread_enabled=False)
    output(PLANNER, "om_p1", "plan")
    package = build(workspace)
    assert package.selected == ()
    assert [item.reason for item in package.excluded] == [EXCLUDED_NOT_IN_MODE]


def test_c14_group_scope_sessions_get_no_shared_topic_history():
    workspace = workspace_create(CODER, session_scope=Workspace.SessionScope.GROUP)
    output(PLANNER, "om_p1", "plan")
    assert build(workspace).selected == ()


def test_c7_c8_local_root_and_item_text_lookups():
    workspace = workspace_create(CODER)
    thread_event_record_inbound(message=inbound(CODER, "the root", message_id=ROOT_ID), workspace=workspace)
    output(PLANNER, "om_card", "card body")
    assert topic_root_text_get(bridge_id=CODER["bridge_id"], chat_id=CHAT_ID, root_msg_id=ROOT_ID) == "the root"
    assert topic_root_text_get(bridge_id=PLANNER["bridge_id"], chat_id=CHAT_ID, root_msg_id=ROOT_ID) is None
    assert context_item_text_get(chat_id=CHAT_ID, message_id="om_card") == "card body"
    assert context_item_text_get(chat_id=CHAT_ID, message_id="om_missing") is None


def test_c5_owner_only_bot_finds_other_outputs_behind_a_long_discussion_other_bridges_recorded():
    # given: the Planner (shared) recorded 300 human messages after its two outputs; the Coder is owner_only
    workspace = workspace_create(CODER, mode=Workspace.Mode.OWNER_ONLY)
    output(PLANNER, "om_p1", "plan 1")
    output(PLANNER, "om_p2", "plan 2")
    bulk_items(300, bridge_id=PLANNER["bridge_id"], item_type="human_message")
    # when
    with CaptureQueriesContext(connection) as queries:
        package = build(workspace)
    # then
    assert len(queries.captured_queries) == 1
    assert [item.line for item in package.selected] == ["planner/s: plan 1", "planner/s: plan 2"]
