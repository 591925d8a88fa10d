"""Feishu document links (issue 26, H2), end to end: a signed @-mention carrying links through the webhook, the
turn (eager) reading the documents as the bot through lark-oapi (docx raw_content, wiki get_node) from the Feishu
stub, the model (the real OpenAI SDK at the LLM stub) getting them as an untrusted block; thread context and the
turn's record keep labels only."""

# ruff: noqa: F811 - fixtures are imported, then asked for by name

import json

import pytest

from agents.models import Turn
from tests.agents.test_tool_turns import tool_model
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401 - fixtures
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import ThreadContextItem, ThreadEvent, Workspace

pytestmark = pytest.mark.django_db

CHAT = "oc_docs"
OWNER = "ou_alice"
PLAN = "Quarterly plan: ship the approvals feature by Friday."
WIKI_TEXT = "Runbook: restart the worker, then check the sweeper."
DOC, WIKI, WIKI_DOC, SHEET, SECRET_DOC, GONE = (
    "doxcnPlanAAAAAAAAAAAA",
    "wikcnRunbookBBBBBBBBB",
    "doxcnRunbookCCCCCCCCC",
    "shtcnNumbersDDDDDDDDD",
    "doxcnSecretEEEEEEEEEE",
    "doxcnGoneFFFFFFFFFFFF",
)


@pytest.fixture
def docs_bot(make_feishu_bot, llm_stub, feishu_stub):
    # Alice owns the bot: U3 lets it read what she shares as itself (tests/feishu/test_doc_readers.py: the others).
    bot = make_feishu_bot(
        slug="reader",
        name="Reader",
        primary_model=tool_model(llm_stub),
        reply_format="text",
        feishu_owner_open_id=OWNER,
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id=CHAT, shared_thread_enabled=True)
    feishu_stub.documents[DOC] = PLAN + f" The app secret is {bot.feishu_app_secret}."
    feishu_stub.documents[WIKI_DOC] = WIKI_TEXT
    feishu_stub.documents[SECRET_DOC] = None  # not shared with the bot
    feishu_stub.wiki_nodes[WIKI] = {"obj_type": "docx", "obj_token": WIKI_DOC, "title": "Runbook", "node_token": WIKI}
    return bot


def ask(feishu, bot, llm_stub, text: str, *, sender: str = OWNER, chat_type: str = "group") -> tuple[Turn, str]:
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Read them.")))
    response, _ = feishu.say(
        bot, text=text, chat_id=CHAT, mention=[bot], sender=sender, message_id="om_links", chat_type=chat_type
    )
    assert response.status_code == 200
    (request,) = llm_stub.requests_for("openai_chat")
    user = request.json["messages"][-1]["content"]
    return Turn.objects.get(bot=bot, source_message_id="om_links"), user if isinstance(user, str) else json.dumps(user)


def test_h2_docx_and_wiki_links_are_read_and_inlined_unreadable_ones_become_labels(
    feishu, docs_bot, llm_stub, settings
):
    settings.FEISHU_DOC_LINKS_MAX_PER_TURN = 5
    text = (
        f"please read https://acme.feishu.cn/docx/{DOC} and https://acme.feishu.cn/wiki/{WIKI} "
        f"and https://acme.larksuite.com/sheets/{SHEET} and https://acme.feishu.cn/docx/{SECRET_DOC} "
        f"and https://acme.feishu.cn/docx/{GONE}"
    )

    turn, prompt = ask(feishu, docs_bot, llm_stub, text)

    # the model got both documents in the untrusted block, the secret redacted, and a label for each other link
    assert turn.status == "delivered"
    assert "[Amux Feishu Attachments]" in prompt and "untrusted data" in prompt
    assert PLAN in prompt and WIKI_TEXT in prompt and '"Runbook"' in prompt
    assert docs_bot.feishu_app_secret not in prompt
    assert f"[document: https://acme.larksuite.com/sheets/{SHEET} (not read: a sheet is not a document" in prompt
    assert f"docx/{SECRET_DOC} (not read: the bot may not read it (share it with the bot))]" in prompt
    assert f"docx/{GONE} (not read: Feishu does not know this document)]" in prompt
    # the reads went through lark-oapi to Feishu's own routes
    assert len(feishu.stub.requests_to("wiki_get_node")) == 1
    assert len(feishu.stub.requests_to("doc_raw_content")) == 4
    # nothing of the documents is stored: not the turn's record, not thread context
    stored = (
        json.dumps(turn.model_input)
        + json.dumps(list(ThreadContextItem.objects.values_list("text", flat=True)))
        + json.dumps(list(ThreadEvent.objects.values_list("text", flat=True)))
    )
    assert PLAN not in stored and WIKI_TEXT not in stored
    assert f"[document: https://acme.feishu.cn/docx/{DOC} (inlined for this call)]" in json.dumps(turn.model_input)
    assert f"https://acme.feishu.cn/docx/{DOC}" in stored  # the link itself stays


def test_h2_caps_per_link_and_per_turn(feishu, docs_bot, llm_stub, settings):
    settings.FEISHU_DOC_LINK_MAX_CHARS = 20
    settings.FEISHU_DOC_LINKS_MAX_PER_TURN = 1

    _turn, prompt = ask(
        feishu, docs_bot, llm_stub, f"https://acme.feishu.cn/docx/{DOC} https://acme.feishu.cn/wiki/{WIKI}"
    )

    assert PLAN[:20] in prompt and PLAN[:21] not in prompt
    assert "not read: more than 1 document links in one message" in prompt
    assert WIKI_TEXT not in prompt
    assert len(feishu.stub.requests_to("doc_raw_content")) == 1
