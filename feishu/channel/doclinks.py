"""Feishu document links in a request, read at turn time as the bot, only for whom U3 allows (ARCHITECTURE H2, U3).

A link to a docx document (`https://<tenant>.feishu.cn/docx/<id>`, larksuite.com and larkoffice.com alike) is read
with `docx.v1.document.raw_content`; a wiki page (`/wiki/<token>`) is resolved first (`wiki.v2.space.get_node`)
and read when it is a docx document. Sheets, bitables and any other kind get a label. At most
FEISHU_DOC_LINKS_MAX_PER_TURN links per message are read, each cut at FEISHU_DOC_LINK_MAX_CHARS; what is read goes
through the turn's attachments (feishu.channel.attachments): secrets redacted, an untrusted block, within the
turn's attachment budget, and only labels in the turn's record. The message's text (thread context, the judge)
keeps the link, never the document. A link the bot cannot read becomes a label saying why; the turn still runs.

U3, what people share is read as them or not at all: reading with the bot's tenant token for whoever asks made the
bot a confused deputy (a stranger's DM "what does <link> say?" got a document shared with the bot). Until the hub
can act as a person (user OAuth, a later issue), `document_reader_for` (pure) decides for the turn's principal (the
person who asked, or who started a hand-off chain): the bot reads as itself only for its owner
(`Bot.feishu_owner_open_id`), the chat's owner (`Workspace.owner_open_id`) and the people the owner named for the
chat (`allowed_open_ids`, `command_open_ids`) or, in a DM, for the bot's direct messages (`dm_open_ids`). For
anyone else no document or wiki call is made: the model gets a note in the content's place, the answer ends with a
line telling the person (`documents_notice_text`), and each link's record (who read it, why; `doc_links_read`'s
return) is kept on the turn for explain.
"""

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_lazy as _

from agents.models import Bot, Turn
from agents.principals import Principal, principal_from_turn
from agents.secrets import upstream_error_redacted
from feishu.admission import bot_owner_is, workspace_owner_is
from feishu.inbound.parsing import ParsedMessage
from feishu.outbound import docs as feishu_docs  # the module: lazy (lark-oapi loads on first use)
from feishu.outbound.api_errors import FeishuApiError
from threadcontext.models import Workspace
from threadcontext.selectors import workspace_cached_get

logger = logging.getLogger(__name__)

LINK = re.compile(
    r"https?://[A-Za-z0-9.-]*?(?:feishu\.cn|larksuite\.com|larkoffice\.com)/(docx|wiki|sheets|base)/([A-Za-z0-9]{8,64})"
)
NOT_A_DOCUMENT = "not read: a {kind} is not a document; only docx documents are read"
TOO_MANY = "not read: more than {limit} document links in one message"
NO_PERMISSION = "not read: the bot may not read it (share it with the bot)"
NOT_FOUND = "not read: Feishu does not know this document"
FAILED = "not read: Feishu answered code {code}"
# Feishu's codes for a document the app may not read, and for one that does not exist (docx and wiki).
PERMISSION_CODES = frozenset({1770032, 131006, 91403, 99991672, 99991679})
NOT_FOUND_CODES = frozenset({1770002, 131005, 91402})
KIND_WORDS = {"sheets": "sheet", "sheet": "sheet", "base": "bitable", "bitable": "bitable"}
# What the model gets in place of a document U3 does not let the bot read for this person.
NOT_READ_FOR_PERSON = (
    "not read for this person: {reason}; a line after your answer tells them, do not guess its content"
)
READ = "read"
DOCUMENTS_KEY = "documents"  # Turn.channel_state: each linked document's record (U3), for explain and the answer

# U3: as whom a document is read (Reader.identity), and the rule that decided (Reader.rule, stable for tests).
IDENTITY_BOT = "bot"
IDENTITY_NONE = "none"
READER_BOT_OWNER = "bot_owner"
READER_CHAT_OWNER = "chat_owner"
READER_LISTED = "listed"
READER_DM_LISTED = "dm_listed"
READER_NOT_LISTED = "not_listed"
READER_NOBODY = "no_principal"
# The line the answer ends with for the links not read for this person, in the bot's language, by rule.
NOT_READ_LINES = {
    "group": _(
        "I did not read %(links)s for you: in this chat I read shared documents only for my owner and the people "
        "the chat lists. Paste the part you need, or ask the chat's owner to list you."
    ),
    "dm": _(
        "I did not read %(links)s for you: I read shared documents only for my owner and the people listed for my "
        "direct messages. Paste the part you need instead."
    ),
    READER_NOBODY: _("I did not read %(links)s: this request carries no person to read it for."),
}


@dataclass(frozen=True)
class Reader:
    """U3's answer for one turn: read its documents as the bot, or not at all, and why (explain, the model's note)."""

    identity: str  # IDENTITY_BOT | IDENTITY_NONE
    rule: str
    reason: str  # a sentence (English; the person's line is NOT_READ_LINES, translated)

    @property
    def may_read(self) -> bool:
        return self.identity == IDENTITY_BOT


NO_READER = Reader(IDENTITY_NONE, READER_NOBODY, "nobody to read it for: the request carries no person")


def document_reader_for(*, bot: Bot, workspace: Workspace | None, principal: Principal) -> Reader:
    """Pure (U3): as whom the bot may read what `principal` shares in this chat (`workspace`; None for a DM).

    The owner's lists count and an empty list names nobody: `allowed_open_ids` and `command_open_ids` are the
    people the chat's owner named (to use the bot, to steer it), `dm_open_ids` those the bot's owner named for DMs.
    The bot's reach is its owner's to lend; an open group or DM policy lends it to nobody.
    """
    if not principal.is_known:
        return NO_READER
    if bot_owner_is(bot=bot, principal=principal):
        return Reader(IDENTITY_BOT, READER_BOT_OWNER, "read as the bot: asked by the bot's owner")
    if workspace_owner_is(workspace=workspace, principal=principal):
        return Reader(IDENTITY_BOT, READER_CHAT_OWNER, "read as the bot: asked by the chat's owner")
    if workspace is None:
        if principal.is_one_of(list(bot.dm_open_ids or [])):
            return Reader(IDENTITY_BOT, READER_DM_LISTED, "read as the bot: listed for the bot's direct messages")
        return Reader(
            IDENTITY_NONE,
            READER_NOT_LISTED,
            "the bot reads shared documents as itself only for its owner and the people listed for its direct "
            "messages, and this person is neither",
        )
    if principal.is_one_of([*(workspace.allowed_open_ids or []), *(workspace.command_open_ids or [])]):
        return Reader(IDENTITY_BOT, READER_LISTED, "read as the bot: listed by the chat")
    return Reader(
        IDENTITY_NONE,
        READER_NOT_LISTED,
        "the bot reads shared documents as itself only for its owner and the people this chat lists, and this "
        "person is neither",
    )


def turn_document_reader(*, turn: Turn, parsed: ParsedMessage) -> Reader:
    """U3 for a turn: its principal (a hand-off's: the person who started the chain) in its chat. The workspace is
    the cached one routing and prepare read: no statement."""
    workspace = None if parsed.is_direct else workspace_cached_get(bot_profile=turn.bot.slug, chat_id=parsed.chat_id)
    return document_reader_for(bot=turn.bot, workspace=workspace, principal=principal_from_turn(turn))


def documents_notice_text(*, bot: Bot, documents: list[dict], is_direct: bool) -> str:
    """The line an answer ends with for the links not read for its person (U3), in the bot's language; "" when
    every document was read (or failed for another reason, which the model's label already says)."""
    refused = [record for record in documents if record.get("identity") == IDENTITY_NONE]
    if not refused:
        return ""
    key = READER_NOBODY if refused[0].get("rule") == READER_NOBODY else ("dm" if is_direct else "group")
    with translation.override(bot.language):
        return str(NOT_READ_LINES[key]) % {"links": ", ".join(str(record["url"]) for record in refused)}


def reply_with_documents_notice(*, turn: Turn, parsed: ParsedMessage, text: str) -> str:
    """The answer as the chat gets it: the person hears which documents were not read for them (U3), whatever
    the model wrote (a model may ignore its note; an echo model has none)."""
    documents = (turn.channel_state or {}).get(DOCUMENTS_KEY, [])
    notice = documents_notice_text(bot=turn.bot, documents=documents, is_direct=parsed.is_direct)
    return f"{text}\n\n{notice}" if notice else text


@dataclass(frozen=True)
class DocLink:
    kind: str  # docx | wiki | sheets | base
    token: str
    url: str


def doc_links_find(text: str) -> list[DocLink]:
    """The document links of a text, each once, in order (pure)."""
    found: dict[str, DocLink] = {}
    for match in LINK.finditer(text or ""):
        found.setdefault(match.group(2), DocLink(kind=match.group(1), token=match.group(2), url=match.group(0)))
    return list(found.values())


def doc_label(link: DocLink, note: str = "", title: str = "") -> str:
    """`[document: <url>]`, `[document: <url>, "Title" (not read: ...)]`."""
    text = f"document: {link.url}" + (f', "{title}"' if title else "")
    return f"[{text} ({note})]" if note else f"[{text}]"


def _reason(error: FeishuApiError) -> str:
    if error.code in PERMISSION_CODES or error.http_status == 403:
        return NO_PERMISSION
    if error.code in NOT_FOUND_CODES or error.http_status == 404:
        return NOT_FOUND
    return FAILED.format(code=error.code or error.http_status or "none")


def _record(link: DocLink, reader: Reader, outcome: str, error: str = "") -> dict:
    """One link's record on the turn (explain): as whom it was read, the rule and why, and what came of it."""
    record = {"url": link.url, "kind": link.kind, "identity": reader.identity, "rule": reader.rule}
    return record | {"reason": reader.reason, "outcome": outcome} | ({"error": error} if error else {})


def doc_links_read(
    *,
    bot: Bot,
    links: list[DocLink],
    reader: Reader,
    inline: Callable[[Callable[[str], str], str], None],
    note: Callable[[str], None],
) -> list[dict]:
    """Read each link as `reader` allows (see the module docstring): `inline(label, body)` for a document's text
    (label(note) names it), `note(text)` for a link that stays a label. Returns each link's record."""
    if not reader.may_read:  # U3: no Feishu call at all, a note in the content's place
        outcome = NOT_READ_FOR_PERSON.format(reason=reader.reason)
        for link in links:
            note(doc_label(link, outcome))
        return [_record(link, reader, outcome) for link in links]
    limit = settings.FEISHU_DOC_LINKS_MAX_PER_TURN
    records = []
    for index, link in enumerate(links):
        if index >= limit:
            note(doc_label(link, TOO_MANY.format(limit=limit)))
            records.append(_record(link, reader, TOO_MANY.format(limit=limit)))
            continue
        kind, token, title = link.kind, link.token, ""
        try:
            if kind == "wiki":
                node = feishu_docs.wiki_node_get(bot=bot, token=token)
                kind, token, title = node.obj_type, node.obj_token, node.title
            if kind != "docx":
                outcome = NOT_A_DOCUMENT.format(kind=KIND_WORDS.get(kind, kind or "page"))
                note(doc_label(link, outcome, title))
                records.append(_record(link, reader, outcome))
                continue
            text = feishu_docs.doc_raw_content(bot=bot, document_id=token)
        except FeishuApiError as error:
            logger.warning(
                "feishu document not read",
                extra={"bot": bot.slug, "kind": link.kind, "code": error.code, "http_status": error.http_status},
            )
            note(doc_label(link, _reason(error), title))
            # Feishu's own words for explain, which may quote what it refused: the one redaction step.
            said = upstream_error_redacted(error.message, extra=bot.feishu_secrets, max_chars=300)
            records.append(_record(link, reader, _reason(error), error=said))
            continue
        inline(functools.partial(_status_label, link, title), text[: settings.FEISHU_DOC_LINK_MAX_CHARS])
        records.append(_record(link, reader, READ))
    return records


def _status_label(link: DocLink, title: str, status: str) -> str:
    return doc_label(link, status, title)
