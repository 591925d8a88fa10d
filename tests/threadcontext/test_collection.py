"""The collector (C2-C4, C6): what is recorded per mode, what is never recorded, mentions, truncation, idempotency."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from tests.threadcontext.conftest import (
    CHAT_ID,
    CODER,
    OWNER_OPEN_ID,
    PLANNER,
    ROOT_ID,
    inbound,
    workspace_create,
)
from threadcontext.models import ThreadContextItem, ThreadEvent, Workspace
from threadcontext.selectors import workspace_get, workspace_settings_resolve
from threadcontext.services import (
    Mention,
    normalise_mentions,
    thread_event_record_agent_output,
    thread_event_record_inbound,
    thread_event_record_topic_root,
)
from threadcontext.services.collection import (
    SKIP_DIRECT_MESSAGE,
    SKIP_NO_WORKSPACE,
    SKIP_NOT_COLLECTED_TYPE,
    SKIP_NOT_HUMAN,
    SKIP_NOT_OWNER,
    SKIP_OWN_ECHO,
    SKIP_OWNER_ONLY_DISCUSSION,
    SKIP_SLASH_COMMAND,
)

pytestmark = pytest.mark.django_db


def rows(bridge_id: str = CODER["bridge_id"]) -> list[tuple[str, str]]:
    return list(ThreadEvent.objects.filter(bridge_id=bridge_id).order_by("id").values_list("event_type", "text"))


def items(bridge_id: str = CODER["bridge_id"]) -> list[tuple[str, str, str]]:
    return list(
        ThreadContextItem.objects.filter(bridge_id=bridge_id)
        .order_by("id")
        .values_list("item_type", "author_label", "text")
    )


# --- mentions (C4) --------------------------------------------------------------------------------------------


def test_c4_this_bots_mention_is_stripped_and_others_become_display_names():
    mentions = [
        Mention(key="@_user_1", open_id="ou_coder", name="Coder", is_this_bot=True),
        Mention(key="@_user_2", open_id="ou_alice", name="Alice"),
        Mention(key="@_user_3", open_id="ou_planner", name="Alice 的 Planner"),
    ]
    text = "@_user_1 please ask @_user_2 and @_user_3 about it"
    assert normalise_mentions(text, mentions) == "please ask @Alice and @Alice 的 Planner about it"


def test_c4_no_feishu_mention_key_survives_even_without_mention_metadata():
    normalised = normalise_mentions("hi @_user_7 and @_user_12 and @_all", [])
    assert "@_user_" not in normalised
    assert normalised == "hi @user and @user and @all"


def test_c4_human_message_items_keep_display_names_not_keys():
    workspace = workspace_create(CODER)
    message = inbound(
        CODER,
        "@_user_2 what do you think?",
        mentions=(Mention(key="@_user_2", open_id="ou_bob", name="Bob"),),
    )
    thread_event_record_inbound(message=message, workspace=workspace)
    assert items() == [("human_message", "Alice", "@Bob what do you think?")]


# --- collection rules per mode (C2) ---------------------------------------------------------------------------


def test_c2_shared_topic_root_plain_text_is_topic_root_with_the_real_actor_type():
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(
        message=inbound(CODER, "daily report", message_id=ROOT_ID, sender_type="app", sender_id="cli_x"),
        workspace=workspace,
    )
    assert outcome.created == ("topic_root",)
    event = ThreadEvent.objects.get()
    assert (event.event_type, event.actor_type, event.actor_id, event.root_msg_id) == (
        "topic_root",
        "app",
        "cli_x",
        ROOT_ID,
    )
    assert items() == [("topic_root", "Alice", "daily report")]


def test_c2_shared_un_at_text_is_human_message_and_triggers_nothing():
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(message=inbound(CODER, "I think we need a login fix"), workspace=workspace)
    assert outcome.created == ("human_message",)
    assert outcome.triggers_selector is False
    assert rows() == [("human_message", "I think we need a login fix")]


def test_c2_at_bot_text_is_a_user_request_event_without_an_item_and_triggers_the_selector():
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(message=inbound(CODER, "fix it", addressed=True), workspace=workspace)
    assert outcome.created == ("user_request",)
    assert outcome.triggers_selector is True
    assert outcome.request_text == "fix it"
    assert rows() == [("user_request", "fix it")]
    assert items() == []


def test_c2_a_root_that_ats_the_bot_is_both_topic_root_and_user_request():
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(
        message=inbound(CODER, "build a snake game", message_id=ROOT_ID, addressed=True), workspace=workspace
    )
    assert outcome.created == ("topic_root", "user_request")
    assert outcome.request_text == "build a snake game"
    assert items() == [("topic_root", "Alice", "build a snake game")]


def test_c2_owner_only_records_topic_root_but_never_un_at_discussion():
    workspace = workspace_create(CODER, mode=Workspace.Mode.OWNER_ONLY)
    root = thread_event_record_inbound(message=inbound(CODER, "the task", message_id=ROOT_ID), workspace=workspace)
    chatter = thread_event_record_inbound(message=inbound(CODER, "random chatter"), workspace=workspace)
    assert root.created == ("topic_root",)
    assert chatter.recorded == ()
    assert chatter.skipped_reason == SKIP_OWNER_ONLY_DISCUSSION
    assert rows() == [("topic_root", "the task")]


def test_c2_owner_only_records_a_user_request_only_from_the_owner():
    workspace = workspace_create(CODER, mode=Workspace.Mode.OWNER_ONLY)
    stranger = thread_event_record_inbound(
        message=inbound(CODER, "do my bidding", addressed=True, sender_id="ou_stranger"), workspace=workspace
    )
    owner = thread_event_record_inbound(
        message=inbound(CODER, "do the task", addressed=True, sender_id=OWNER_OPEN_ID), workspace=workspace
    )
    assert (stranger.triggers_selector, stranger.skipped_reason) == (False, SKIP_NOT_OWNER)
    assert owner.triggers_selector is True
    assert rows() == [("user_request", "do the task")]


def test_c2_agent_output_keeps_every_round():
    for round_number in (1, 2, 3):
        thread_event_record_agent_output(
            **PLANNER,
            chat_id=CHAT_ID,
            root_msg_id=ROOT_ID,
            message_id=f"om_out_{round_number}",
            text=f"plan v{round_number}",
            session_name="planner-h5",
        )
    assert items(PLANNER["bridge_id"]) == [
        ("agent_output", "planner/planner-h5", "plan v1"),
        ("agent_output", "planner/planner-h5", "plan v2"),
        ("agent_output", "planner/planner-h5", "plan v3"),
    ]


def test_c2_topic_root_fetched_online_is_recorded_once_with_its_sender_type():
    first, created = thread_event_record_topic_root(
        **CODER, chat_id=CHAT_ID, root_msg_id=ROOT_ID, text="root text", sender_type="app", sender_name="Reporter"
    )
    again, created_again = thread_event_record_topic_root(
        **CODER, chat_id=CHAT_ID, root_msg_id=ROOT_ID, text="root text"
    )
    assert (created, created_again, first.pk) == (True, False, again.pk)
    assert (first.actor_type, first.metadata["fetched_online"]) == ("app", True)
    assert items() == [("topic_root", "Reporter", "root text")]


# --- idempotency -----------------------------------------------------------------------------------------------


def test_c1_redelivered_message_records_nothing_twice():
    workspace = workspace_create(CODER)
    message = inbound(CODER, "hello", message_id="om_dup")
    first = thread_event_record_inbound(message=message, workspace=workspace)
    second = thread_event_record_inbound(message=message, workspace=workspace)
    assert first.created == ("human_message",)
    assert (second.created, second.recorded) == ((), ("human_message",))
    assert ThreadEvent.objects.count() == 1
    assert ThreadContextItem.objects.count() == 1


def test_c1_a_new_message_and_its_item_are_one_statement_on_postgresql_two_on_sqlite():
    # given
    workspace = workspace_create(CODER)
    message = inbound(CODER, "hello there", message_id="om_new")
    # when: recorded inside the caller's transaction, as routing records it
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        outcome = thread_event_record_inbound(message=message, workspace=workspace)
    # then: the writes (the retention prune that may follow is its own concern), on PostgreSQL without a savepoint
    # (a duplicate is an ON CONFLICT, not a failed INSERT to roll back; SQLite's two INSERTs share one)
    statements = [query["sql"] for query in captured]
    writes = [statement for statement in statements if statement.startswith(("INSERT", "WITH"))]
    assert len(writes) == (1 if connection.vendor == "postgresql" else 2), statements
    if connection.vendor == "postgresql":
        assert statements[0].startswith("WITH"), statements
    (event,) = outcome.events
    assert (event.pk, event.event_type, event.text) == (ThreadEvent.objects.get().pk, "human_message", "hello there")
    item = ThreadContextItem.objects.get()
    assert (item.event_id, item.message_id, item.item_type, item.text, item.token_estimate) == (
        event.pk,
        "om_new",
        "human_message",
        "hello there",
        3,
    )
    assert (item.chat_id, item.root_msg_id, item.bridge_id) == (event.chat_id, event.root_msg_id, event.bridge_id)


def test_c1_the_unique_constraint_holds_at_the_database():
    ThreadEvent.objects.create(
        chat_id=CHAT_ID,
        root_msg_id=ROOT_ID,
        message_id="om_1",
        event_type="human_message",
        bridge_id="b",
        bot_profile="p",
    )
    with pytest.raises(IntegrityError):
        ThreadEvent.objects.create(
            chat_id=CHAT_ID,
            root_msg_id=ROOT_ID,
            message_id="om_1",
            event_type="human_message",
            bridge_id="b",
            bot_profile="p",
        )


def test_c1_each_bridge_records_the_same_feishu_message_under_its_own_bridge_id():
    for bot in (PLANNER, CODER):
        thread_event_record_inbound(
            message=inbound(bot, "hello all", message_id="om_shared"), workspace=workspace_create(bot)
        )
    assert sorted(ThreadEvent.objects.values_list("bridge_id", flat=True)) == ["cli_coder", "cli_planner"]


# --- never collected (C3) --------------------------------------------------------------------------------------


def test_c3_direct_messages_are_never_collected():
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(
        message=inbound(CODER, "private question", chat_type="p2p", addressed=True), workspace=workspace
    )
    event, created = thread_event_record_agent_output(
        **CODER, chat_id="oc_dm", root_msg_id="", message_id="om_dm_reply", text="private answer", chat_type="p2p"
    )
    assert outcome.skipped_reason == SKIP_DIRECT_MESSAGE
    assert (event, created) == (None, False)
    assert ThreadEvent.objects.count() == 0


def test_c3_the_bots_own_echo_is_never_collected():
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(
        message=inbound(CODER, "my own reply", is_own_echo=True, sender_type="app"), workspace=workspace
    )
    assert outcome.skipped_reason == SKIP_OWN_ECHO
    assert ThreadEvent.objects.count() == 0


@pytest.mark.parametrize("message_type", ["reaction", "stream_chunk", "tool_activity", "permission", "interactive"])
def test_c3_non_message_payloads_are_never_collected(message_type):
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(
        message=inbound(CODER, "payload", message_type=message_type), workspace=workspace
    )
    assert outcome.skipped_reason == SKIP_NOT_COLLECTED_TYPE
    assert ThreadEvent.objects.count() == 0


def test_c3_slash_commands_are_not_recorded():
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(
        message=inbound(CODER, "/new", addressed=True, is_slash_command=True), workspace=workspace
    )
    assert outcome.skipped_reason == SKIP_SLASH_COMMAND
    assert ThreadEvent.objects.count() == 0


def test_c3_another_bots_message_is_not_recorded_as_human_discussion():
    workspace = workspace_create(CODER)
    outcome = thread_event_record_inbound(
        message=inbound(CODER, "planner's message", sender_type="app", sender_id="cli_planner"), workspace=workspace
    )
    assert outcome.skipped_reason == SKIP_NOT_HUMAN
    assert ThreadEvent.objects.count() == 0


def test_c3_chat_without_workspace_collects_nothing():
    outcome = thread_event_record_inbound(message=inbound(CODER, "hello"), workspace=None)
    assert outcome.skipped_reason == SKIP_NO_WORKSPACE
    assert ThreadEvent.objects.count() == 0


def test_c3_secrets_never_reach_an_event_or_item():
    workspace = workspace_create(CODER)
    secret = "app-secret-0123456789"
    thread_event_record_inbound(
        message=inbound(CODER, f"oops I pasted {secret} here"), workspace=workspace, secrets=[secret]
    )
    thread_event_record_agent_output(
        **CODER, chat_id=CHAT_ID, root_msg_id=ROOT_ID, message_id="om_o", text=f"token={secret}", secrets=[secret]
    )
    # in write order: PostgreSQL returns an unordered read in whatever order its heap holds the rows
    stored = list(ThreadEvent.objects.order_by("id").values_list("text", flat=True)) + list(
        ThreadContextItem.objects.order_by("id").values_list("text", flat=True)
    )
    assert stored == [
        "oops I pasted [redacted] here",
        "token=[redacted]",
        "oops I pasted [redacted] here",
        "token=[redacted]",
    ]
    assert all(secret not in str(metadata) for metadata in ThreadEvent.objects.values_list("metadata", flat=True))


# --- truncation (C6) -------------------------------------------------------------------------------------------


@override_settings(AMUX_MAX_AGENT_OUTPUT_CHARS=20000)
def test_c6_agent_output_over_20000_chars_is_truncated_and_marked():
    long_output = "输" * 20001
    event, created = thread_event_record_agent_output(
        **PLANNER, chat_id=CHAT_ID, root_msg_id=ROOT_ID, message_id="om_long", text=long_output
    )
    item = ThreadContextItem.objects.get()
    assert created is True
    assert (len(event.text), len(item.text)) == (20000, 20000)
    assert event.metadata == {"truncated": True, "original_chars": 20001}
    assert item.metadata == {"truncated": True, "original_chars": 20001}


def test_c6_agent_output_at_the_limit_is_kept_whole():
    event, _ = thread_event_record_agent_output(
        **PLANNER, chat_id=CHAT_ID, root_msg_id=ROOT_ID, message_id="om_exact", text="x" * 20000
    )
    assert (len(event.text), event.metadata) == (20000, {})


# --- workspace settings ----------------------------------------------------------------------------------------


@override_settings(AMUX_FEISHU_TOPIC_ROOT_ENABLED=True, AMUX_FEISHU_SHARED_THREAD_ENABLED=False)
def test_workspace_settings_fall_back_to_the_hub_and_overrides_win():
    inheriting = workspace_create(CODER, shared_thread_enabled=None)
    overriding = workspace_create(PLANNER, shared_thread_enabled=True, topic_root_enabled=False)
    assert workspace_get(bot_profile="coder", chat_id=CHAT_ID) == inheriting
    assert workspace_get(bot_profile="coder", chat_id="oc_other") is None
    inherited = workspace_settings_resolve(workspace=inheriting)
    overridden = workspace_settings_resolve(workspace=overriding)
    assert (inherited.topic_root_enabled, inherited.shared_thread_enabled) == (True, False)
    assert (overridden.topic_root_enabled, overridden.shared_thread_enabled) == (False, True)
    assert workspace_settings_resolve(workspace=None).thread_context_limit == 20


def test_c4_removing_the_bots_mention_keeps_indentation_and_spacing_elsewhere():
    mentions = [Mention(key="@_user_1", open_id="ou_coder", name="Coder", is_this_bot=True)]
    text = "@_user_1 fix this:\n    if  x:\n        return 1\nthanks @_user_1"
    assert normalise_mentions(text, mentions) == "fix this:\n    if  x:\n        return 1\nthanks"


def test_c2_owner_only_strangers_at_on_a_root_records_the_root_but_is_still_not_owner():
    workspace = workspace_create(CODER, mode=Workspace.Mode.OWNER_ONLY)
    outcome = thread_event_record_inbound(
        message=inbound(CODER, "do it", message_id=ROOT_ID, addressed=True, sender_id="ou_stranger"),
        workspace=workspace,
    )
    assert (outcome.recorded, outcome.triggers_selector, outcome.skipped_reason) == (
        ("topic_root",),
        False,
        SKIP_NOT_OWNER,
    )
