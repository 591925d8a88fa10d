"""Issue 25 (ARCHITECTURE §11.4 K1/K2) through the webhook: lark-oapi against the local Feishu, the model at the
LLM stub through the real OpenAI SDK, Celery eager. Each command's reply and effect, and its refusal."""

from __future__ import annotations

import json
import re

import pytest

from agents.models import Bot, Turn
from feishu.models import OutboundDelivery
from tests.agents.test_llm_adapters import model_for
from tests.feishu.commands_helpers import full_help
from threadcontext.explain import decision_explain_text
from threadcontext.models import (
    ContextClear,
    ContextPin,
    ThreadContextDecision,
    ThreadContextItem,
    ThreadEvent,
    Workspace,
)

pytestmark = pytest.mark.django_db

ROOT = "om_root"
TOPIC = {"root_id": ROOT, "thread_id": "omt_1", "parent_id": ROOT}


@pytest.fixture
def bot(make_feishu_bot, llm_stub) -> Bot:
    """A bot whose model is an OpenAI chat model at the LLM stub, answering in plain text."""
    return make_feishu_bot(primary_model=model_for("openai_chat", llm_stub), reply_format="text")


def model_input(llm_stub) -> str:
    """The last user message the model was sent (the rendered prompt)."""
    body = llm_stub.requests_for("openai_chat")[-1].json
    return [message for message in body["messages"] if message["role"] == "user"][-1]["content"]


def last_reply(feishu) -> str:
    return feishu.stub.sent_texts()[-1]


def workspace(bot: Bot, **fields) -> Workspace:
    """The group's workspace with shared thread context on (the hub's default leaves it off, seed 002)."""
    return Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group", shared_thread_enabled=True, **fields)


def topic_with(feishu, bot: Bot, *texts: str) -> None:
    if not Workspace.objects.filter(bot_profile=bot.slug).exists():
        workspace(bot)
    feishu.say(bot, text="REQUIREMENT: the export must be CSV", message_id=ROOT)
    for index, text in enumerate(texts):
        feishu.say(bot, text=text, message_id=f"om_m{index}", **TOPIC)


def command(feishu, bot: Bot, text: str, **where) -> str:
    """Send `@bot <text>` in the topic (or as `where` says) and return the bot's one reply."""
    sent_before = len(feishu.stub.sent)
    feishu.say(bot, text=text, mention=[bot], **({**TOPIC, **where}))
    assert len(feishu.stub.sent) == sent_before + 1, "a command answers with exactly one reply"
    return last_reply(feishu)


def test_k1_context_show_is_the_next_requests_selection_and_starts_nothing(feishu, bot, llm_stub):
    topic_with(feishu, bot, "first thought", "second thought", "third thought")
    counts = (ThreadEvent.objects.count(), ThreadContextItem.objects.count(), Turn.objects.count())

    shown = command(feishu, bot, "/context show")

    # one markdown card, no model call, no turn, nothing recorded as context
    assert feishu.stub.sent[-1]["msg_type"] == "interactive"
    assert llm_stub.requests_for("openai_chat") == []
    assert (ThreadEvent.objects.count(), ThreadContextItem.objects.count(), Turn.objects.count()) == counts
    shown_ids = [int(found) for found in re.findall(r"#(\d+)", shown)]
    assert len(shown_ids) == 4 and "second thought" in shown

    # the next request's model input holds exactly those items
    feishu.say(bot, text="summarise please", mention=[bot], **TOPIC)
    decision = ThreadContextDecision.objects.latest("id")
    assert decision.selected_item_ids == shown_ids
    for text in ThreadContextItem.objects.filter(pk__in=shown_ids).values_list("text", flat=True):
        assert text in model_input(llm_stub)


def test_k1_clear_then_an_at_leaves_the_earlier_discussion_out_and_explain_says_cleared(feishu, bot, llm_stub):
    topic_with(feishu, bot, "use XML instead", "no, YAML")

    reply = command(feishu, bot, "/context clear")
    feishu.say(bot, text="fresh start: JSON it is", **TOPIC)
    feishu.say(bot, text="what did we settle on?", mention=[bot], **TOPIC)

    assert "Cleared" in reply
    sent = model_input(llm_stub)
    assert "fresh start: JSON it is" in sent
    assert "use XML instead" not in sent and "no, YAML" not in sent
    decision = ThreadContextDecision.objects.latest("id")
    assert {item["reason"] for item in decision.excluded if item["preview"] in ("use XML instead", "no, YAML")} == {
        "cleared"
    }
    assert "cleared" in decision_explain_text(decision=decision)
    assert ThreadContextItem.objects.filter(text="use XML instead").exists()  # nothing deleted


def test_k1_clear_keeps_pins_and_clear_all_drops_them(feishu, bot):
    topic_with(feishu, bot, "keep me")
    command(feishu, bot, "/context pin", parent_id="om_m0")

    command(feishu, bot, "/context clear")
    assert ContextPin.objects.count() == 1
    command(feishu, bot, "/context clear all")

    assert ContextPin.objects.count() == 0
    assert list(ContextClear.objects.values_list("includes_pins", flat=True).order_by("id")) == [False, True]
    assert "Nothing from this conversation" in command(feishu, bot, "/context show")


def test_k1_owner_only_refuses_others_and_says_who_may_and_help_lists_only_what_they_may_run(feishu, bot):
    workspace(bot, mode="owner_only", owner_open_id="ou_owner")
    topic_with(feishu, bot, "a message")

    refused = command(feishu, bot, "/context clear", sender="ou_alice")
    help_text = command(feishu, bot, "/help", sender="ou_alice")
    allowed = command(feishu, bot, "/context clear", sender="ou_owner")

    assert refused == 'Only the workspace owner (<at user_id="ou_owner"></at>) may run /context here.'
    assert ContextClear.objects.filter(cleared_by="ou_alice").count() == 0
    assert "/context show" not in help_text and "/context and /schedule are for the workspace owner" in help_text
    assert allowed.startswith("Cleared")
    assert full_help(bot) == command(feishu, bot, "/help", sender="ou_owner")


def test_k1_an_explicit_command_list_decides_in_a_shared_workspace(feishu, bot):
    workspace(bot, command_open_ids=["ou_bob"])
    topic_with(feishu, bot, "a message")

    refused = command(feishu, bot, "/context show", sender="ou_alice")
    shown = command(feishu, bot, "/context show", sender="ou_bob")

    assert refused == 'Only the people this workspace lists (<at user_id="ou_bob"></at>) may run /context here.'
    assert "#" in shown


@pytest.mark.parametrize(
    ("language", "cleared", "refused"),
    [
        ("zh-hans", "已清空", "只有工作区所有者"),
        ("ja", "クリアしました", "ワークスペースのオーナー"),
    ],
)
def test_k1_answers_speak_the_bots_language_while_the_command_words_stay_english(
    feishu, make_feishu_bot, language, cleared, refused
):
    bot = make_feishu_bot(language=language)
    workspace(bot, mode="owner_only", owner_open_id="ou_owner")
    topic_with(feishu, bot, "a message")

    assert command(feishu, bot, "/context clear", sender="ou_owner").startswith(cleared)
    assert refused in command(feishu, bot, "/context clear", sender="ou_alice")


def test_k2_pin_unpin_and_pins_as_replies_to_a_message_and_a_bots_reply(feishu, bot, llm_stub):
    topic_with(feishu, bot, "human point")
    feishu.say(bot, text="a question", mention=[bot], **TOPIC)
    bot_reply = OutboundDelivery.objects.filter(bot=bot, turn__isnull=False).latest("id").feishu_message_id

    assert command(feishu, bot, "/context pin", parent_id="om_m0").startswith("Pinned")
    assert command(feishu, bot, "/context pin", parent_id="om_m0") == "That message is already pinned."
    assert command(feishu, bot, "/context pin", parent_id=bot_reply).startswith("Pinned")
    assert command(feishu, bot, "/context pin", parent_id="om_unknown").startswith("I have no record")
    listed = command(feishu, bot, "/context pins")
    assert listed.startswith("Pinned in this conversation (2):") and "human point" in listed

    assert command(feishu, bot, "/context unpin", parent_id="om_m0") == "Unpinned."
    assert command(feishu, bot, "/context unpin", parent_id="om_m0") == "That message was not pinned."
    assert command(feishu, bot, "/context unpin all") == "Removed 1 pins."
    assert ContextPin.objects.count() == 0


def test_k2_a_pinned_topic_root_reaches_the_model_after_forty_newer_messages_with_limit_five(feishu, bot, llm_stub):
    workspace(bot, thread_context_limit=5)
    topic_with(feishu, bot)
    feishu.say(bot, text="first question", mention=[bot], **TOPIC)  # the session's first turn delivers the root
    command(feishu, bot, "/context pin")  # in the topic without a quote: the topic root
    for index in range(40):
        feishu.say(bot, text=f"chatter {index}", message_id=f"om_c{index}", **TOPIC)

    feishu.say(bot, text="does the export meet the requirement?", mention=[bot], **TOPIC)

    assert "REQUIREMENT: the export must be CSV" in model_input(llm_stub)
    decision = ThreadContextDecision.objects.latest("id")
    root_item = ThreadContextItem.objects.get(message_id=ROOT, item_type="topic_root")
    assert decision.selected_item_ids[0] == root_item.pk and len(decision.selected_item_ids) == 5
    assert decision.diagnostics["pinned_item_ids"] == [root_item.pk]
    explained = decision_explain_text(decision=decision)
    assert [str(root_item.pk), "topic_root", "ou_alice", "pinned"] in [
        line.split()[:4] for line in explained.splitlines()
    ]

    # unpinned, the root is trimmed like any old item
    command(feishu, bot, "/context unpin")
    feishu.say(bot, text="and now?", mention=[bot], **TOPIC)
    assert "REQUIREMENT" not in model_input(llm_stub)
    excluded = {item["id"]: item["reason"] for item in ThreadContextDecision.objects.latest("id").excluded}
    assert excluded[root_item.pk] == "item_limit"


def test_k1_export_sends_the_selection_and_pins_as_a_markdown_file(feishu, bot):
    topic_with(feishu, bot, "point one", "point two")
    command(feishu, bot, "/context pin", parent_id="om_m0")

    feishu.say(bot, text="/context export", mention=[bot], **TOPIC)

    [upload] = feishu.stub.requests_to("file_create")
    [stored] = feishu.stub.files.values()
    assert stored["file_type"] == "stream" and stored["file_name"].endswith(".md")
    assert "## Pins (1)" in stored["file"] and "point one" in stored["file"] and "point two" in stored["file"]
    assert "REQUIREMENT: the export must be CSV" in stored["file"]
    sent = feishu.stub.sent[-1]
    assert sent["msg_type"] == "file" and json.loads(sent["content"])["file_key"] in feishu.stub.files
    assert upload.status == 200


def test_k1_a_failed_export_upload_says_so_and_changes_nothing(feishu, bot):
    topic_with(feishu, bot, "point one")
    feishu.stub.fail_next("file_create", status=400, code=234001, times=5)

    reply = command(feishu, bot, "/context export")

    assert reply == "I could not send the export file. Please try again later."
    assert getattr(feishu.stub, "files", {}) == {}


def test_k1_in_a_direct_chat_context_commands_say_there_is_no_group_context(feishu, bot):
    for text in ("/context show", "/context export"):
        feishu.say(bot, text=text, chat_id="oc_dm", chat_type="p2p")
        assert last_reply(feishu) == "A direct chat carries no group context: only this session's own history."
    assert Turn.objects.count() == 0 and ThreadContextItem.objects.count() == 0
