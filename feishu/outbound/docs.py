"""Feishu documents read as the bot (H2): a docx document's raw text (`docx.v1.document.raw_content`) and what a
wiki node points at (`wiki.v2.space.get_node`). Each call goes through `feishu_call` (retries, token refresh);
Feishu's refusal (no permission, not found) is raised as `FeishuApiError`, the caller turns it into a label.

Imports lark-oapi at its top: registered as a lazy module in feishu/__init__.py (LARK_MODULES).
"""

from collections.abc import Callable
from dataclasses import dataclass

from agents.models import Bot
from feishu.outbound import client as feishu_client
from feishu.outbound.sdk import GetNodeSpaceRequest, RawContentDocumentRequest


@dataclass(frozen=True)
class WikiNode:
    obj_type: str  # docx, doc, sheet, bitable, mindnote, file, slides
    obj_token: str
    title: str


def doc_raw_content(*, bot: Bot, document_id: str, sleep: Callable[[float], None] | None = None) -> str:
    """A docx document's whole text, as Feishu renders it plain."""
    request = RawContentDocumentRequest.builder().document_id(document_id).lang(0).build()
    response = feishu_client.feishu_call(
        bot=bot,
        operation="docx.raw_content",
        call=lambda client: client.docx.v1.document.raw_content(request),
        sleep=sleep,
    )
    return str(response.data.content or "")


def wiki_node_get(*, bot: Bot, token: str, sleep: Callable[[float], None] | None = None) -> WikiNode:
    """What a wiki page is: its object's type and token (a docx document, a sheet...) and its title."""
    request = GetNodeSpaceRequest.builder().token(token).build()
    response = feishu_client.feishu_call(
        bot=bot, operation="wiki.get_node", call=lambda client: client.wiki.v2.space.get_node(request), sleep=sleep
    )
    node = response.data.node
    return WikiNode(obj_type=str(node.obj_type or ""), obj_token=str(node.obj_token or ""), title=str(node.title or ""))
