"""U3 (issue 35): what people share is read as them, or not at all. Until the hub can act as a person, a Feishu
document or wiki link is read with the bot's identity only for the bot's owner, the chat's owner and the people the
chat (or, in a DM, the bot's direct-message list) names; for anyone else no docx or wiki call is made, the model
gets a note in the content's place and the answer ends with a line saying why. A hand-off carries the chain's
principal. Through the real path: signed webhooks, routing, the turn (eager), the LLM stub (the OpenAI SDK),
lark-oapi and the Feishu stub, whose recorded calls show what was (not) read."""

# ruff: noqa: F811 - fixtures are imported, then asked for by name

import json

import pytest
from django.urls import reverse

from agents.models import Bot, Turn
from agents.principals import Principal
from feishu.channel.doclinks import (
    IDENTITY_BOT,
    IDENTITY_NONE,
    READER_BOT_OWNER,
    READER_CHAT_OWNER,
    READER_DM_LISTED,
    READER_LISTED,
    READER_NOBODY,
    READER_NOT_LISTED,
    document_reader_for,
)
from tests.agents.test_tool_turns import tool_model
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401 - fixtures
from tests.feishu.test_doc_links import CHAT, DOC, OWNER, PLAN, WIKI, WIKI_TEXT, ask, docs_bot  # noqa: F401
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db

MALLORY, LISTED, COMMANDER, CHAT_OWNER = "ou_mallory", "ou_listed", "ou_commander", "ou_chat_owner"
LINKS = f"what do https://acme.feishu.cn/docx/{DOC} and https://acme.feishu.cn/wiki/{WIKI} say?"
GROUP_LINE = (
    f"I did not read https://acme.feishu.cn/docx/{DOC}, https://acme.feishu.cn/wiki/{WIKI} for you: in this chat I "
    "read shared documents only for my owner and the people the chat lists. Paste the part you need, or ask the "
    "chat's owner to list you."
)


def document_calls(stub) -> int:
    return len(stub.requests_to("doc_raw_content")) + len(stub.requests_to("wiki_get_node"))


def sent_text(stub, bot: Bot) -> str:
    (sent,) = [sent for sent in stub.sent if sent["app_id"] == bot.feishu_app_id]
    return json.loads(sent["content"])["text"]


def test_u3_a_strangers_dm_with_a_doc_and_a_wiki_link_reads_nothing_and_the_answer_says_why(
    feishu, docs_bot, llm_stub, admin_client
):
    # when a stranger asks the bot in a DM (the DM policy lets everyone in) what two shared documents say
    turn, prompt = ask(feishu, docs_bot, llm_stub, LINKS, sender=MALLORY, chat_type="p2p")

    # then no document or wiki call was made, as the bot or otherwise
    assert document_calls(feishu.stub) == 0
    # the model got a note in each document's place, never its content
    assert PLAN not in prompt and WIKI_TEXT not in prompt
    assert prompt.count("(not read for this person: the bot reads shared documents as itself only for its owner") == 2
    # the person reads why at the end of the answer, whatever the model wrote
    assert sent_text(feishu.stub, docs_bot) == (
        "Read them.\n\n"
        f"I did not read https://acme.feishu.cn/docx/{DOC}, https://acme.feishu.cn/wiki/{WIKI} for you: I read "
        "shared documents only for my owner and the people listed for my direct messages. Paste the part you need "
        "instead."
    )
    # explain says as whom each document was read (nobody) and why
    assert [(d["url"], d["identity"], d["rule"]) for d in turn.channel_state["documents"]] == [
        (f"https://acme.feishu.cn/docx/{DOC}", IDENTITY_NONE, READER_NOT_LISTED),
        (f"https://acme.feishu.cn/wiki/{WIKI}", IDENTITY_NONE, READER_NOT_LISTED),
    ]
    page = admin_client.get(reverse("admin:feishu_turn_explain", args=[turn.pk])).content.decode()
    assert 'id="explain-documents"' in page and page.count('data-identity="none"') == 2
    assert "nobody (not read)" in page and "neither an owner nor listed" in page


def test_u3_the_bots_owner_in_a_dm_gets_the_document_read_as_the_bot_and_explain_says_so(
    feishu, docs_bot, llm_stub, admin_client
):
    turn, prompt = ask(feishu, docs_bot, llm_stub, LINKS, sender=OWNER, chat_type="p2p")

    assert PLAN in prompt and WIKI_TEXT in prompt
    assert (len(feishu.stub.requests_to("doc_raw_content")), len(feishu.stub.requests_to("wiki_get_node"))) == (2, 1)
    assert sent_text(feishu.stub, docs_bot) == "Read them."  # nothing to tell
    assert {(d["identity"], d["rule"], d["outcome"]) for d in turn.channel_state["documents"]} == {
        (IDENTITY_BOT, READER_BOT_OWNER, "read")
    }
    page = admin_client.get(reverse("admin:feishu_turn_explain", args=[turn.pk])).content.decode()
    assert page.count('data-identity="bot"') == 2 and "asked by the bot&#x27;s owner" in page


@pytest.mark.parametrize(
    ("sender", "allowed", "is_read", "rule"),
    [
        (CHAT_OWNER, [], True, READER_CHAT_OWNER),
        (LISTED, [LISTED], True, READER_LISTED),
        (COMMANDER, [], True, READER_LISTED),
        (MALLORY, [], False, READER_NOT_LISTED),  # an open chat lets everyone use the bot and lists nobody
    ],
)
def test_u3_in_a_group_documents_are_read_as_the_bot_only_for_owners_and_listed_people(
    feishu, docs_bot, llm_stub, sender, allowed, is_read, rule
):
    # given a chat with an owner, the people it lets use the bot (none: everyone) and one it lets run commands
    workspace = Workspace.objects.get(bot_profile=docs_bot.slug, chat_id=CHAT)
    workspace.owner_open_id, workspace.allowed_open_ids, workspace.command_open_ids = CHAT_OWNER, allowed, [COMMANDER]
    workspace.save()

    # when
    turn, prompt = ask(feishu, docs_bot, llm_stub, LINKS, sender=sender)

    # then
    assert turn.status == "delivered"
    assert (PLAN in prompt, document_calls(feishu.stub)) == ((True, 3) if is_read else (False, 0))
    assert {d["rule"] for d in turn.channel_state["documents"]} == {rule}
    expected = "Read them." if is_read else f"Read them.\n\n{GROUP_LINE}"
    assert sent_text(feishu.stub, docs_bot) == expected


@pytest.fixture
def planner_and_vault(make_feishu_bot, llm_stub, feishu_stub):
    """Planner (Alice's) and Vault (Bob's; a document is shared with Vault), text bots of one shared group."""
    planner = make_feishu_bot(
        slug="planner", name="Planner", primary_model=tool_model(llm_stub), reply_format="text",
        feishu_owner_open_id=OWNER,
    )  # fmt: skip
    vault = make_feishu_bot(
        slug="vault", name="Vault", primary_model=tool_model(llm_stub), reply_format="text",
        feishu_owner_open_id="ou_bob",
    )  # fmt: skip
    feishu_stub.documents[DOC] = PLAN
    return planner, vault


@pytest.mark.parametrize(("asker", "vault_reads"), [(MALLORY, False), ("ou_bob", True)])
def test_u3_a_hand_off_reads_a_document_for_the_person_who_started_the_chain(
    feishu, planner_and_vault, llm_stub, asker, vault_reads
):
    planner, vault = planner_and_vault
    link = f"https://acme.feishu.cn/docx/{DOC}"
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text=f"@Vault please summarise {link}")))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Summary.")))

    # when someone asks Planner to have Vault summarise a document shared with Vault (both apps hear it)
    for bot in (vault, planner):
        feishu.say(bot, text=f"ask Vault to summarise {link}", chat_id=CHAT, message_id="om_ask", mention=[planner],
                   sender=asker)  # fmt: skip

    # then Vault's hand-off turn acts for the person who asked Planner, and reads only for Vault's owner
    handed = Turn.objects.get(bot=vault)
    assert (handed.trigger, handed.status, handed.principal_open_id) == ("handoff", "delivered", asker)
    vault_prompt = llm_stub.requests_for("openai_chat")[1].json["messages"][-1]["content"]
    assert (PLAN in vault_prompt) is vault_reads
    # Planner never reads it (neither asker is Planner's owner), Vault once for Bob and never for Mallory
    assert len(feishu.stub.requests_to("doc_raw_content")) == (1 if vault_reads else 0)
    assert [d["identity"] for d in handed.channel_state["documents"]] == [
        IDENTITY_BOT if vault_reads else IDENTITY_NONE
    ]
    told = f"I did not read {link} for you: in this chat I read shared documents only for my owner"
    assert (told in sent_text(feishu.stub, vault)) is not vault_reads


def test_u3_a_document_read_error_quoting_the_app_secret_is_recorded_redacted(feishu, docs_bot, llm_stub, admin_client):
    # given Feishu refuses the document and quotes the bot's app secret
    feishu.stub.fail_next(
        "doc_raw_content", status=403, code=1770032, msg=f"no access for {docs_bot.feishu_app_secret}"
    )

    # when the owner asks
    turn, prompt = ask(feishu, docs_bot, llm_stub, f"read https://acme.feishu.cn/docx/{DOC}")

    # then the label says why, and the record keeps Feishu's words without the secret
    assert "(not read: the bot may not read it (share it with the bot))" in prompt
    [record] = turn.channel_state["documents"]
    assert (record["identity"], record["error"]) == (IDENTITY_BOT, "no access for [redacted]")
    page = admin_client.get(reverse("admin:feishu_turn_explain", args=[turn.pk])).content.decode()
    assert "no access for [redacted]" in page and docs_bot.feishu_app_secret not in page


def _bot(**fields) -> Bot:
    return Bot(slug="b", feishu_owner_open_id="ou_owner", **fields)


@pytest.mark.parametrize(
    ("principal", "workspace", "bot", "expected"),
    [
        (Principal(), None, _bot(), (IDENTITY_NONE, READER_NOBODY)),
        (Principal(user_id=1), None, _bot(), (IDENTITY_NONE, READER_NOT_LISTED)),  # a hub user is no Feishu reader
        (Principal(open_id="ou_owner"), None, _bot(), (IDENTITY_BOT, READER_BOT_OWNER)),
        (Principal(open_id="ou_x", union_id="on_owner"), None, Bot(feishu_owner_open_id="on_owner"),
         (IDENTITY_BOT, READER_BOT_OWNER)),
        (Principal(open_id="ou_dm"), None, _bot(dm_open_ids=["ou_dm"]), (IDENTITY_BOT, READER_DM_LISTED)),
        (Principal(open_id="ou_x"), None, _bot(dm_open_ids=["ou_dm"]), (IDENTITY_NONE, READER_NOT_LISTED)),
        (Principal(open_id="ou_dm"), Workspace(), _bot(dm_open_ids=["ou_dm"]), (IDENTITY_NONE, READER_NOT_LISTED)),
        (Principal(open_id="ou_co"), Workspace(owner_open_id="ou_co"), _bot(), (IDENTITY_BOT, READER_CHAT_OWNER)),
        (Principal(open_id="ou_owner"), Workspace(owner_open_id="ou_co"), _bot(), (IDENTITY_BOT, READER_BOT_OWNER)),
        (Principal(open_id="ou_a"), Workspace(allowed_open_ids=["ou_a"]), _bot(), (IDENTITY_BOT, READER_LISTED)),
        (Principal(open_id="ou_c"), Workspace(command_open_ids=["ou_c"]), _bot(), (IDENTITY_BOT, READER_LISTED)),
        (Principal(open_id="ou_x"), Workspace(allowed_open_ids=["ou_a", ""]), _bot(), (IDENTITY_NONE, READER_NOT_LISTED)),
        (Principal(open_id="ou_x"), Workspace(), Bot(), (IDENTITY_NONE, READER_NOT_LISTED)),  # no owner known
    ],
)  # fmt: skip
def test_u3_document_reader_for_is_the_bot_only_for_owners_and_listed_people(principal, workspace, bot, expected):
    reader = document_reader_for(bot=bot, workspace=workspace, principal=principal)

    assert (reader.identity, reader.rule) == expected
