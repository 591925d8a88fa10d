"""Pure parsing of a stored `im.message.receive_v1` payload into the fields routing needs (no queries).

Feishu's shapes (reference doc §2): `content` is a JSON string; text messages carry `{"text": ...}` with
mention keys like `@_user_1`; rich text `post` carries `{"title", "content": [[{tag, ...}, ...], ...]}`,
sometimes under a locale key. Mention ids are objects in events and strings in API responses.

Every message becomes text plus a list of attachment references (G7): `image` `{"image_key"}`, `file`
`{"file_key", "file_name"}`, `img`/`media` tags inside a post, `audio` `{"file_key", "duration"}`, `media`
(video) `{"file_key", "image_key", "file_name", "duration"}`, `sticker` `{"file_key"}`. The text holds a label
where each attachment was (`[image]`, `[file: report.pdf]`): that label, never a body, is what thread context
and the probe judge see (seed 002); the turn downloads the bytes (feishu.channel.attachments). `merge_forward`
is a label (its children are read online at turn time); `interactive` is the card's text. Other types are a
label naming the type. lark_oapi.channel.normalize parses the same shapes, but its converters render keys into
the text (`![image](img_v3_...)`) and its post flattener drops mention keys, which the collector needs (C4): the
hub keeps its own walk and uses the SDK's CardKit walk only for v2 card JSON (`card_text`).
"""

import json
from dataclasses import dataclass, field
from typing import Any

from agents.principals import NOBODY, Principal
from threadcontext.models import MAIN_TIMELINE_KEY

# Issue 25 added /context and /schedule (feishu.commands); each is handled, never recorded as context.
SLASH_COMMANDS = ("/new", "/help", "/context", "/schedule")
# What the hub learned about a stored event beside Feishu's own payload (routing writes it before any turn or
# wake reads the event): {"chat_is_topic": bool}, from the workspace's cached im.v1.chat.get (G1).
HUB_ANNOTATIONS_KEY = "amux"


@dataclass(frozen=True)
class Mention:
    key: str
    open_id: str
    name: str


# Attachment kinds; `resource_type` is what im.v1.message_resource.get's `type` wants for each.
ATTACHMENT_IMAGE = "image"
ATTACHMENT_FILE = "file"
ATTACHMENT_AUDIO = "audio"
ATTACHMENT_VIDEO = "video"
ATTACHMENT_STICKER = "sticker"
ATTACHMENT_FORWARD = "forward"  # a merge_forward: its children are messages, read with im.v1.message.get
DOWNLOADABLE_KINDS = frozenset({ATTACHMENT_IMAGE, ATTACHMENT_FILE})


@dataclass(frozen=True)
class Attachment:
    """A reference to a message's resource: never its bytes."""

    kind: str
    key: str  # image_key or file_key ("" for a forward)
    name: str = ""
    size: int | None = None  # bytes, when known
    duration_ms: int | None = None

    @property
    def resource_type(self) -> str:
        return "image" if self.kind == ATTACHMENT_IMAGE else "file"

    def label(self, note: str = "") -> str:
        return attachment_label(kind=self.kind, name=self.name, size=self.size, note=note, duration_ms=self.duration_ms)


KIND_WORDS = {
    ATTACHMENT_IMAGE: "image",
    ATTACHMENT_FILE: "file",
    ATTACHMENT_AUDIO: "audio",
    ATTACHMENT_VIDEO: "video",
    ATTACHMENT_STICKER: "sticker",
    ATTACHMENT_FORWARD: "forwarded messages",
}


def size_text(size: int) -> str:
    """120 KB, 3.4 MB, 512 bytes: how a label states a size."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def attachment_label(
    *, kind: str, name: str = "", size: int | None = None, note: str = "", duration_ms: int | None = None
) -> str:
    """`[image]`, `[file: report.pdf, 120 KB]`, `[audio: 12 s]`, `[image: a.png, 9.0 MB: not sent, too large]`."""
    details = [part for part in (name.replace("]", ")").strip(),) if part]
    if size is not None:
        details.append(size_text(size))
    if duration_ms:
        details.append(f"{round(duration_ms / 1000)} s")
    text = KIND_WORDS.get(kind, kind)
    if details:
        text += ": " + ", ".join(details)
    if note:
        text += f" ({note})"
    return f"[{text}]"


@dataclass(frozen=True)
class MessageContent:
    text: str
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class ParsedMessage:
    message_id: str
    chat_id: str
    chat_type: str  # "p2p" or "group"
    message_type: str
    text: str  # raw text: mention keys are still in it (the collector normalises them)
    sender_open_id: str
    sender_type: str  # "user" or "app"
    sender_union_id: str = ""  # the same person across one developer's apps (open_ids are per app)
    root_id: str = ""
    parent_id: str = ""
    thread_id: str = ""
    mentions: tuple[Mention, ...] = field(default_factory=tuple)
    create_time_ms: int = 0
    # G1: whether every message of this chat is a topic (chat.get); None when the hub could not tell (no Feishu
    # credentials, chat.get failed): then each top-level message stays its own topic, as before G1.
    chat_is_topic: bool | None = None
    attachments: tuple[Attachment, ...] = ()

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

    @property
    def principal(self) -> Principal:
        """U1: the person who sent it, when a person did; a bot's message carries nobody (a hand-off carries its
        chain's principal, feishu.channel.brake)."""
        if self.sender_type != "user":
            return NOBODY
        return Principal(open_id=self.sender_open_id, union_id=self.sender_union_id)

    def mentions_open_id(self, open_id: str) -> bool:
        return bool(open_id) and any(mention.open_id == open_id for mention in self.mentions)

    def text_without_mention_keys(self) -> str:
        text = self.text
        for mention in self.mentions:
            text = text.replace(mention.key, "")
        return " ".join(text.split())


def _post_body(content: dict[str, Any]) -> dict[str, Any]:
    if "content" in content:
        return content
    for value in content.values():  # localised: {"zh_cn": {"title", "content"}}
        if isinstance(value, dict) and "content" in value:
            return value
    return content


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


def _post_content(content: dict[str, Any]) -> MessageContent:
    body = _post_body(content)
    lines: list[str] = []
    attachments: list[Attachment] = []
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
                elif tag == "img" and isinstance(element.get("image_key"), str) and element["image_key"]:
                    attachment = Attachment(kind=ATTACHMENT_IMAGE, key=element["image_key"])
                    attachments.append(attachment)
                    parts.append(attachment.label())
                elif tag == "media" and isinstance(element.get("file_key"), str) and element["file_key"]:
                    attachment = Attachment(
                        kind=ATTACHMENT_VIDEO,
                        key=element["file_key"],
                        duration_ms=_int_or_none(element.get("duration")),
                    )
                    attachments.append(attachment)
                    parts.append(attachment.label())
            lines.append("".join(parts))
    return MessageContent(text="\n".join(line for line in lines if line.strip()), attachments=tuple(attachments))


def _card_elements_text(elements: Any) -> list[str]:
    """A card as message events and message.get show it: `{"title", "elements": [[{tag, text}, ...], ...]}`."""
    lines: list[str] = []
    for row in elements if isinstance(elements, list) else []:
        row = row if isinstance(row, list) else [row]
        parts = [
            str(element.get("text") or element.get("content") or "")
            for element in row
            if isinstance(element, dict)
            and element.get("tag") in ("text", "a", "md", "markdown", "plain_text", "lark_md")
        ]
        line = "".join(parts).strip()
        if line:
            lines.append(line)
    return lines


def card_text(content: dict[str, Any]) -> str:
    """The readable text of an `interactive` message: the title and text elements of the simplified card Feishu
    puts in events, or the markdown and plain-text leaves of a CardKit 2.0 card JSON (the SDK's walk)."""
    lines: list[str] = []
    title = content.get("title")
    if isinstance(title, str) and title.strip():
        lines.append(title.strip())
    elif isinstance(title, dict) and isinstance(title.get("content"), str):
        lines.append(title["content"].strip())
    if isinstance(content.get("text"), str) and content["text"].strip():
        lines.append(content["text"].strip())
    lines.extend(_card_elements_text(content.get("elements")))
    if "schema" in content or "body" in content or "header" in content:
        # Lazy: lark-oapi is loaded only by processes that talk to Feishu (feishu/outbound/sdk.py); parsing is
        # also imported by commands that never do.
        from feishu.outbound.sdk import InteractiveContent, card_converter

        walked, _ = card_converter.convert(InteractiveContent(card=content))
        if walked and walked != "[interactive]":
            lines.extend(line for line in walked.split("\n") if line.strip() and line.strip() not in lines)
    return "\n".join(lines)


def message_content_parse(*, message_type: str, content: dict[str, Any]) -> MessageContent:
    """Text (with a label where each attachment was) and the attachment references of one message's content."""
    if message_type == "text":
        text = content.get("text")
        return MessageContent(text=text if isinstance(text, str) else "")
    if message_type == "post":
        return _post_content(content)
    if message_type == "interactive":
        # Cards: the text we can read; "" lets the caller fall back to the local agent_output item (C7).
        return MessageContent(text=card_text(content))
    key = content.get("image_key") if message_type == "image" else content.get("file_key")
    key = key if isinstance(key, str) else ""
    name = content.get("file_name")
    name = name if isinstance(name, str) else ""
    duration_ms = _int_or_none(content.get("duration"))
    kind = {
        "image": ATTACHMENT_IMAGE,
        "file": ATTACHMENT_FILE,
        "audio": ATTACHMENT_AUDIO,
        "media": ATTACHMENT_VIDEO,
        "sticker": ATTACHMENT_STICKER,
    }.get(message_type)
    if kind is not None:
        attachment = Attachment(kind=kind, key=key, name=name, duration_ms=duration_ms)
        return MessageContent(text=attachment.label(), attachments=(attachment,) if key else ())
    if message_type == "merge_forward":
        attachment = Attachment(kind=ATTACHMENT_FORWARD, key="")
        return MessageContent(text=attachment.label(), attachments=(attachment,))
    if not message_type:
        return MessageContent(text="")
    return MessageContent(text=f"[{message_type.replace(']', ')')} message]")  # a labelled placeholder


def content_text(*, message_type: str, content: dict[str, Any]) -> str:
    """The plain text of a message's content, a label where each attachment was."""
    return message_content_parse(message_type=message_type, content=content).text


def _open_id(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("open_id") or "")
    return str(value or "")


def _union_id(value: Any) -> str:
    return str(value.get("union_id") or "") if isinstance(value, dict) else ""


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
    parsed_content = message_content_parse(message_type=message_type, content=content)
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
        text=parsed_content.text,
        sender_open_id=_open_id(sender.get("sender_id")),
        sender_union_id=_union_id(sender.get("sender_id")),
        sender_type=str(sender.get("sender_type") or ""),
        root_id=str(message.get("root_id") or ""),
        parent_id=str(message.get("parent_id") or ""),
        thread_id=str(message.get("thread_id") or ""),
        mentions=mentions,
        create_time_ms=create_time_ms,
        chat_is_topic=chat_is_topic if isinstance(chat_is_topic, bool) else None,
        attachments=parsed_content.attachments,
    )


def slash_command(text: str) -> str:
    """The command word (one of SLASH_COMMANDS) the text (without mention keys) starts with, else ""."""
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
