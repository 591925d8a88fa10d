"""Pure parsing of a stored `im.message.receive_v1` payload into the fields routing needs (no queries).

Feishu's shapes (reference doc §2): `content` is a JSON string; text messages carry `{"text": ...}` with
mention keys like `@_user_1`; rich text `post` carries `{"title", "content": [[{tag, ...}, ...], ...]}`,
sometimes under a locale key. Mention ids are objects in events and strings in API responses.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from threadcontext.models import MAIN_TIMELINE_KEY

SLASH_COMMANDS = ("/new", "/help")
# What the hub learned about a stored event beside Feishu's own payload (routing writes it before any turn or
# wake reads the event): {"chat_is_topic": bool}, from the workspace's cached im.v1.chat.get (G1).
HUB_ANNOTATIONS_KEY = "amux"


@dataclass(frozen=True)
class Mention:
    key: str
    open_id: str
    name: str


@dataclass(frozen=True)
class ParsedMessage:
    message_id: str
    chat_id: str
    chat_type: str  # "p2p" or "group"
    message_type: str
    text: str  # raw text: mention keys are still in it (the collector normalises them)
    sender_open_id: str
    sender_type: str  # "user" or "app"
    root_id: str = ""
    parent_id: str = ""
    thread_id: str = ""
    mentions: tuple[Mention, ...] = field(default_factory=tuple)
    create_time_ms: int = 0
    # G1: whether every message of this chat is a topic (chat.get); None when the hub could not tell (no Feishu
    # credentials, chat.get failed): then each top-level message stays its own topic, as before G1.
    chat_is_topic: bool | None = None

    @property
    def is_main_timeline(self) -> bool:
        """G1: a group message outside any thread (no thread_id) in an ordinary (non-topic) group."""
        return self.chat_type == "group" and not self.thread_id and self.chat_is_topic is False

    @property
    def is_direct(self) -> bool:
        return self.chat_type == "p2p"

    @property
    def root_msg_id(self) -> str:
        """The timeline this message belongs to: the main timeline of an ordinary group (G1), else its topic's
        root, or itself when it starts one."""
        if self.is_main_timeline:
            return MAIN_TIMELINE_KEY
        return self.root_id or self.message_id

    @property
    def is_topic_root(self) -> bool:
        return not self.root_id or self.root_id == self.message_id

    @property
    def is_in_topic(self) -> bool:
        """Posted inside a topic (a reply in thread or a topic group's message), not the root itself."""
        return bool(self.thread_id) or (bool(self.root_id) and self.root_id != self.message_id)

    @property
    def is_explicit_reply(self) -> bool:
        """C7: parent_id set, and either no thread_id or parent_id != root_id."""
        return bool(self.parent_id) and (not self.thread_id or self.parent_id != self.root_id)

    def mentions_open_id(self, open_id: str) -> bool:
        return bool(open_id) and any(mention.open_id == open_id for mention in self.mentions)

    def text_without_mention_keys(self) -> str:
        text = self.text
        for mention in self.mentions:
            text = text.replace(mention.key, "")
        return " ".join(text.split())


def _post_text(content: dict[str, Any]) -> str:
    body = content
    if "content" not in body:  # localised: {"zh_cn": {"title", "content"}}
        for value in content.values():
            if isinstance(value, dict) and "content" in value:
                body = value
                break
    lines: list[str] = []
    title = body.get("title")
    if isinstance(title, str) and title.strip():
        lines.append(title.strip())
    paragraphs = body.get("content")
    if isinstance(paragraphs, list):
        for paragraph in paragraphs:
            if not isinstance(paragraph, list):
                continue
            parts: list[str] = []
            for element in paragraph:
                if not isinstance(element, dict):
                    continue
                tag = element.get("tag")
                if tag in ("text", "a", "code_block", "md"):
                    parts.append(str(element.get("text", "")))
                elif tag == "at":
                    user_id = str(element.get("user_id", ""))
                    parts.append(user_id if user_id.startswith("@_") else "@" + str(element.get("user_name", "")))
                elif tag == "emotion":
                    parts.append(f":{element.get('emoji_type', '')}:")
            lines.append("".join(parts))
    return "\n".join(line for line in lines if line.strip())


def content_text(*, message_type: str, content: dict[str, Any]) -> str:
    """The plain text of a message's content; "" for types without text (images, files, stickers)."""
    if message_type == "text":
        text = content.get("text")
        return text if isinstance(text, str) else ""
    if message_type == "post":
        return _post_text(content)
    if message_type == "interactive":
        # Cards: only inline text we can read; the caller falls back to the local agent_output item (C7).
        for key in ("text", "title"):
            if isinstance(content.get(key), str):
                return content[key]
    return ""


def _open_id(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("open_id") or "")
    return str(value or "")


def message_parse(payload: dict[str, Any]) -> ParsedMessage | None:
    """The routing fields of one receive event, or None when it is not a readable message."""
    event = payload.get("event")
    if not isinstance(event, dict):
        return None
    message = event.get("message")
    sender = event.get("sender") or {}
    if not isinstance(message, dict) or not isinstance(sender, dict):
        return None
    message_id = message.get("message_id")
    chat_id = message.get("chat_id")
    if not isinstance(message_id, str) or not isinstance(chat_id, str) or not message_id or not chat_id:
        return None
    message_type = str(message.get("message_type") or message.get("msg_type") or "")
    raw_content = message.get("content") or ""
    try:
        content = json.loads(raw_content) if isinstance(raw_content, str) and raw_content else {}
    except ValueError:
        content = {}
    if not isinstance(content, dict):
        content = {}
    mentions = tuple(
        Mention(key=str(item.get("key", "")), open_id=_open_id(item.get("id")), name=str(item.get("name", "")))
        for item in (message.get("mentions") or [])
        if isinstance(item, dict)
    )
    annotations = payload.get(HUB_ANNOTATIONS_KEY)
    chat_is_topic = annotations.get("chat_is_topic") if isinstance(annotations, dict) else None
    try:
        create_time_ms = int(message.get("create_time") or 0)
    except (TypeError, ValueError):
        create_time_ms = 0
    return ParsedMessage(
        message_id=message_id,
        chat_id=chat_id,
        chat_type=str(message.get("chat_type") or ""),
        message_type=message_type,
        text=content_text(message_type=message_type, content=content),
        sender_open_id=_open_id(sender.get("sender_id")),
        sender_type=str(sender.get("sender_type") or ""),
        root_id=str(message.get("root_id") or ""),
        parent_id=str(message.get("parent_id") or ""),
        thread_id=str(message.get("thread_id") or ""),
        mentions=mentions,
        create_time_ms=create_time_ms,
        chat_is_topic=chat_is_topic if isinstance(chat_is_topic, bool) else None,
    )


def slash_command(text: str) -> str:
    """ "/new" or "/help" when the text (without mention keys) is that command, else ""."""
    words = text.strip().split()
    if words and words[0].lower() in SLASH_COMMANDS:
        return words[0].lower()
    return ""


def text_chunks(text: str, *, limit: int) -> list[str]:
    """Split a reply under Feishu's size limit, preferring paragraph then line boundaries; never empty."""
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    rest = text
    while len(rest) > limit:
        cut = rest.rfind("\n\n", 0, limit)
        if cut < limit // 2:
            cut = rest.rfind("\n", 0, limit)
        if cut < limit // 2:
            cut = limit
        chunks.append(rest[:cut].rstrip("\n") or rest[:cut])
        rest = rest[cut:].lstrip("\n")
    if rest:
        chunks.append(rest)
    return chunks
