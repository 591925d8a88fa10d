"""Markdown that renders (R2): a reply as a CardKit JSON 2.0 card with one markdown element, or plain text;
long answers split on block boundaries and never inside a code fence.

Why not `lark_oapi.channel.outbound.markdown.split_with_code_fences` alone: it cuts at any line (inside a
paragraph or a list item when the buffer is full), recognises only ```` ```word ```` fences (so ```` ```c++ ````,
```` ~~~ ```` and four-backtick fences are not seen and get cut open) and its re-closing fence may push a chunk
past the limit. Here the text is cut into blocks first (a fence is one block, blank lines end the others),
blocks are packed into chunks, and only a block larger than a chunk is cut further: a fence by lines,
re-fenced on both sides with its own opening line; other text by lines, then by words.
"""

import re
from dataclasses import dataclass
from typing import Any, Literal

ReplyFormat = Literal["markdown_card", "text"]

MARKDOWN_ELEMENT_ID = "answer"
# Characters per chunk. A card may hold 30 KB of JSON; a CJK character is 3 bytes of UTF-8 and JSON escapes
# (quotes, newlines) add more, so 6000 characters keep every card well under the cap.
CARD_CHUNK_CHARS = 6000
TEXT_CHUNK_CHARS = 8000
# A streaming card starts with this so the person sees at once that the bot is writing.
STREAMING_PLACEHOLDER = "…"

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True)
class OutboundContent:
    """What `client.message_reply_content` / `message_create_content` send: a msg_type and its content."""

    msg_type: str
    content: dict[str, Any]


def markdown_card(*, text: str, streaming: bool = False, summary: str = "") -> dict[str, Any]:
    """A CardKit JSON 2.0 card with one markdown element (`MARKDOWN_ELEMENT_ID`), the streaming element too."""
    config: dict[str, Any] = {"update_multi": True, "streaming_mode": streaming}
    if streaming:
        # Feishu's own typing effect: a few characters per step, so throttled updates still read smoothly.
        config["streaming_config"] = {"print_frequency_ms": {"default": 30}, "print_step": {"default": 2}}
    if summary:
        config["summary"] = {"content": summary}
    return {
        "schema": "2.0",
        "config": config,
        "body": {"elements": [{"tag": "markdown", "element_id": MARKDOWN_ELEMENT_ID, "content": text}]},
    }


def card_summary(text: str, *, limit: int = 60) -> str:
    """The chat-list preview of a card: the first words of the answer without markdown marks."""
    plain = re.sub(r"[#*_`>~\[\]|]", "", text)
    plain = " ".join(plain.split())
    return plain if len(plain) <= limit else plain[: limit - 1] + "…"


def outbound_content(*, text: str, reply_format: ReplyFormat) -> OutboundContent:
    """One chunk as Feishu content: an interactive markdown card or a text message."""
    if reply_format == "text":
        return OutboundContent(msg_type="text", content={"text": text})
    return OutboundContent(msg_type="interactive", content=markdown_card(text=text, summary=card_summary(text)))


def reply_contents(*, text: str, reply_format: ReplyFormat) -> list[OutboundContent]:
    """A whole answer as the messages that carry it, in order; each is sent with its own uuid."""
    limit = TEXT_CHUNK_CHARS if reply_format == "text" else CARD_CHUNK_CHARS
    return [outbound_content(text=chunk, reply_format=reply_format) for chunk in markdown_chunks(text, limit=limit)]


def markdown_chunks(text: str, *, limit: int) -> list[str]:
    """Chunks of at most `limit` characters, cut between blocks; a fence cut open is closed and reopened."""
    if limit < 40:
        raise ValueError("a chunk must hold at least 40 characters")
    text = text.strip("\n")
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    current = ""
    for block in _blocks(text):
        pieces = [block] if len(block) <= limit else _block_pieces(block, limit=limit)
        for piece in pieces:
            joined = f"{current}\n\n{piece}" if current else piece
            if len(joined) <= limit:
                current = joined
                continue
            if current:
                chunks.append(current)
            current = piece
    if current:
        chunks.append(current)
    return chunks


def open_fence(text: str) -> str:
    """The opening line of a fence left open at the end of `text` ("" when every fence is closed)."""
    opening = ""
    for line in text.split("\n"):
        if opening:
            if _closes(line, opening):
                opening = ""
        elif _FENCE_OPEN.match(line):
            opening = line.strip()
    return opening


def fence_closing(opening: str) -> str:
    """The line that closes a fence opened by `opening` (same character, same length)."""
    match = _FENCE_OPEN.match(opening)
    return match.group(1) if match else "```"


def _closes(line: str, opening: str) -> bool:
    marker = fence_closing(opening)
    stripped = line.strip()
    return stripped.startswith(marker[0] * len(marker)) and set(stripped) == {marker[0]}


def _blocks(text: str) -> list[str]:
    """Fences whole; other blocks end at a blank line. Blank lines between blocks are dropped (re-added)."""
    blocks: list[str] = []
    current: list[str] = []
    fence = ""
    for line in text.split("\n"):
        if fence:
            current.append(line)
            if _closes(line, fence):
                blocks.append("\n".join(current))
                current, fence = [], ""
            continue
        if _FENCE_OPEN.match(line):
            if current:
                blocks.append("\n".join(current))
            current, fence = [line], line.strip()
            continue
        if not line.strip():
            if current:
                blocks.append("\n".join(current))
            current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _block_pieces(block: str, *, limit: int) -> list[str]:
    lines = block.split("\n")
    if _FENCE_OPEN.match(lines[0]):
        return _fence_pieces(lines, limit=limit)
    return _line_pieces(lines, limit=limit)


def _fence_pieces(lines: list[str], *, limit: int) -> list[str]:
    """A fence longer than a chunk: each piece opens with the fence's own line and closes it."""
    opening = lines[0].strip()
    closing = fence_closing(opening)
    body = lines[1:-1] if len(lines) > 1 and _closes(lines[-1], opening) else lines[1:]
    room = limit - len(opening) - len(closing) - 2
    pieces = []
    for part in _line_pieces(body, limit=room):
        pieces.append(f"{opening}\n{part}\n{closing}")
    return pieces or [f"{opening}\n{closing}"]


def _line_pieces(lines: list[str], *, limit: int) -> list[str]:
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        for part in _long_line_parts(line, limit=limit):
            added = len(part) + (1 if current else 0)
            if current and size + added > limit:
                pieces.append("\n".join(current))
                current, size = [], 0
                added = len(part)
            current.append(part)
            size += added
    if current:
        pieces.append("\n".join(current))
    return pieces


def _long_line_parts(line: str, *, limit: int) -> list[str]:
    """A line longer than the limit is cut at the last space before it, or hard at the limit."""
    parts = []
    while len(line) > limit:
        cut = line.rfind(" ", 0, limit)
        cut = cut if cut > limit // 2 else limit
        parts.append(line[:cut].rstrip())
        line = line[cut:].lstrip()
    parts.append(line)
    return parts
