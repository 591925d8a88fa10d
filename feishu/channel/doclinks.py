"""Feishu document links in a request, read at turn time as the bot (ARCHITECTURE H2).

A link to a docx document (`https://<tenant>.feishu.cn/docx/<id>`, larksuite.com and larkoffice.com alike) is read
with `docx.v1.document.raw_content`; a wiki page (`/wiki/<token>`) is resolved first (`wiki.v2.space.get_node`)
and read when it is a docx document. Sheets, bitables and any other kind get a label. At most
FEISHU_DOC_LINKS_MAX_PER_TURN links per message are read, each cut at FEISHU_DOC_LINK_MAX_CHARS; what is read goes
through the turn's attachments (feishu.channel.attachments): secrets redacted, an untrusted block, within the
turn's attachment budget, and only labels in the turn's record. The message's text (thread context, the judge)
keeps the link, never the document. A link the bot cannot read becomes a label saying why; the turn still runs.
"""

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from agents.models import Bot
from feishu.outbound import docs as feishu_docs  # the module: lazy (lark-oapi loads on first use)
from feishu.outbound.api_errors import FeishuApiError

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


def doc_links_read(
    *,
    bot: Bot,
    links: list[DocLink],
    inline: Callable[[Callable[[str], str], str], None],
    note: Callable[[str], None],
) -> None:
    """Read each link (see the module docstring): `inline(label, body)` for a document's text (label(note) names
    it), `note(text)` for a link that stays a label."""
    limit = settings.FEISHU_DOC_LINKS_MAX_PER_TURN
    for index, link in enumerate(links):
        if index >= limit:
            note(doc_label(link, TOO_MANY.format(limit=limit)))
            continue
        kind, token, title = link.kind, link.token, ""
        try:
            if kind == "wiki":
                node = feishu_docs.wiki_node_get(bot=bot, token=token)
                kind, token, title = node.obj_type, node.obj_token, node.title
            if kind != "docx":
                note(doc_label(link, NOT_A_DOCUMENT.format(kind=KIND_WORDS.get(kind, kind or "page")), title))
                continue
            text = feishu_docs.doc_raw_content(bot=bot, document_id=token)
        except FeishuApiError as error:
            logger.warning(
                "feishu document not read",
                extra={"bot": bot.slug, "kind": link.kind, "code": error.code, "http_status": error.http_status},
            )
            note(doc_label(link, _reason(error), title))
            continue
        inline(functools.partial(_status_label, link, title), text[: settings.FEISHU_DOC_LINK_MAX_CHARS])


def _status_label(link: DocLink, title: str, status: str) -> str:
    return doc_label(link, status, title)
