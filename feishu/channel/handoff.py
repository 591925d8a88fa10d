"""Hand-offs between bots (B1) and the loop brake (B2).

A bot's final answer that writes `@Name` of another hub bot of the chat (outside code) is sent with a real Feishu
mention of that bot (`handoff_text_render`: a text's `<at user_id>` tag, a card markdown's `<at id>`), and the
mentioned bot gets a turn whose request is that reply. Feishu does not push one bot's message to another bot's
event subscription unless the app asked for it, so the hub hands it over itself: `handoffs_dispatch` stores the
reply as an inbound event of the mentioned bot under the reply's own message id, exactly as Feishu would push it.
Routing then answers it once (`handoff_turn_start`): if Feishu does push it too, it is the same (bot, message
id), stored once, and the turn is unique per (bot, source message) anyway.

The brake counts consecutive bot-triggered turns per Feishu thread across every bot (`Turn.chain_length`): a hand-off
turn counts one more than the turn that asked, unless a person spoke in that thread since; past the chat's
`bot_chain_limit` the would-be turn is recorded `skipped` with the reason and one line is posted.
"""

import logging
import re
import secrets as token_source

from agents.models import Bot, Turn
from feishu.channel.peers import chat_peer_bots, chat_policy
from feishu.inbound.intake import inbound_event_store
from feishu.inbound.parsing import HUB_ANNOTATIONS_KEY, ParsedMessage
from feishu.inbound.signing import mention_entry, message_event_payload

logger = logging.getLogger(__name__)

EVENT_MESSAGE = "im.message.receive_v1"
HANDOFF_EVENT_PREFIX = "handoff"
# The message id of a reply that was recorded, not sent (a bot without Feishu credentials, F5): the turn's own id.
UNSENT_REPLY_PREFIX = "amux-turn-"
_CODE = re.compile(r"(^|\n) {0,3}(`{3,}|~{3,})[^\n]*\n.*?(\n {0,3}\2[^\n]*(?=\n|$)|$)|`[^`\n]+`", re.DOTALL)


def _outside_code(text: str) -> str:
    """The text with fenced blocks and inline code blanked (same length, so positions still match)."""
    return _CODE.sub(lambda match: " " * len(match.group(0)), text)


def _mention_spans(text: str, bot: Bot) -> list[tuple[int, int]]:
    """Where the text writes `@Name` of `bot`, outside code: the name matched case-insensitively, and not followed by
    a letter or digit of a longer Latin word (a CJK name is matched as written, whatever follows)."""
    if not bot.name.strip():
        return []
    pattern = re.compile("@" + re.escape(bot.name.strip()) + r"(?![A-Za-z0-9_])", re.IGNORECASE)
    return [match.span() for match in pattern.finditer(_outside_code(text))]


def handoff_targets(*, text: str, bot: Bot, peers: list[Bot]) -> list[Bot]:
    """Pure (B1): the other hub bots of the chat the answer @-mentions by display name, outside code; never itself.
    Longer names first, so `@Code Reviewer` is not also read as `@Code`."""
    found: list[Bot] = []
    taken: list[tuple[int, int]] = []
    for peer in sorted(peers, key=lambda candidate: -len(candidate.name)):
        spans = [span for span in _mention_spans(text, peer) if not any(a <= span[0] < b for a, b in taken)]
        if spans and peer.pk != bot.pk:
            found.append(peer)
        taken.extend(spans)
    return found


def handoff_text_render(*, text: str, targets: list[Bot], reply_format: str) -> str:
    """Pure: the answer with each target's `@Name` as a real Feishu mention of its open_id (the at-tag of a text
    message, or of a card's markdown); a target whose open_id the hub does not know keeps its plain `@Name`."""
    for target in sorted(targets, key=lambda candidate: -len(candidate.name)):
        if not target.feishu_bot_open_id:
            continue
        if reply_format == "text":
            tag = f'<at user_id="{target.feishu_bot_open_id}">{target.name}</at>'
        else:
            tag = f"<at id={target.feishu_bot_open_id}></at>"
        for start, end in reversed(_mention_spans(text, target)):
            text = text[:start] + tag + text[end:]
    return text


def chat_handoff_targets(*, turn: Turn, parsed: ParsedMessage, text: str) -> list[Bot]:
    """The bots a delivered answer hands off to: none in a DM, or when the chat turned hand-offs off (limit 0)."""
    if parsed.is_direct or "@" not in text:
        return []
    if chat_policy(chat_id=parsed.chat_id).chain_limit == 0:
        return []
    return handoff_targets(text=text, bot=turn.bot, peers=chat_peer_bots(chat_id=parsed.chat_id))


def handoffs_dispatch(*, turn: Turn, parsed: ParsedMessage, message_id: str, text: str, targets: list[Bot]) -> None:
    """Hand the delivered answer (Feishu message `message_id`) to each target as that bot's inbound message."""
    asker = turn.bot
    for target in targets:
        mention = mention_entry(index=1, open_id=target.feishu_bot_open_id, name=target.name)
        request = text
        for start, end in reversed(_mention_spans(text, target)):
            request = request[:start] + "@_user_1" + request[end:]
        payload = message_event_payload(
            verification_token="",
            app_id=target.feishu_app_id,
            message_id=message_id,
            chat_id=parsed.chat_id,
            text=request,
            sender_open_id=asker.feishu_bot_open_id or asker.feishu_app_id,
            sender_type="app",
            # A reply to the asker's request, so in its timeline: the request's topic, or (in an ordinary group,
            # outside a thread) the chat's main timeline, which the chat-mode annotation below keeps (G1).
            root_id=parsed.root_id or parsed.message_id,
            thread_id=parsed.thread_id,
            mentions=[mention],
            event_id=f"{HANDOFF_EVENT_PREFIX}-{token_source.token_hex(12)}",
        )
        if parsed.chat_is_topic is not None:
            payload[HUB_ANNOTATIONS_KEY] = {"chat_is_topic": parsed.chat_is_topic}
        _event, stored = inbound_event_store(
            bot=target, event_id=payload["header"]["event_id"], message_id=message_id, event_type=EVENT_MESSAGE,
            payload=payload,
        )  # fmt: skip
        logger.info(
            "bot hand-off" if stored else "bot hand-off already received from Feishu",
            extra={"turn": turn.pk, "from": asker.slug, "to": target.slug, "message_id": message_id},
        )
