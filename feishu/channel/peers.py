"""The hub's bots of one chat and what they agree on together (ARCHITECTURE §11.3, B1-B4).

Each bot has its own Workspace row for a chat (threadcontext keys workspaces by bot and chat), but the rules of
bots working together are the chat's: the brake counts across every bot of a thread (B2) and one answer per
message is one across bots (B3). So the chat's policy is read over every live workspace of the chat: the
strictest wins (the smallest chain limit; `each` only when every workspace says `each`), so no bot's owner can
loosen a rule another owner set.
"""

from dataclasses import dataclass

from agents.models import Bot
from feishu.inbound.parsing import ParsedMessage
from threadcontext.models import Workspace

DEFAULT_CHAIN_LIMIT = 6  # Workspace.bot_chain_limit's default, for a chat nobody configured


@dataclass(frozen=True)
class ChatPolicy:
    chain_limit: int  # B2: consecutive bot-triggered turns per thread; 0: no hand-offs
    answers: str  # B3: Workspace.DiscussAnswers


def chat_peer_bots(*, chat_id: str) -> list[Bot]:
    """The enabled hub bots with a live workspace in this chat (the bots that heard of it), by slug."""
    slugs = Workspace.objects.filter(chat_id=chat_id, retired_at__isnull=True).values_list("bot_profile", flat=True)
    return list(Bot.objects.filter(slug__in=list(slugs), is_enabled=True).order_by("slug"))


def chat_policy(*, chat_id: str) -> ChatPolicy:
    """The chat's chain limit and answer policy over every live workspace of the chat (the strictest wins)."""
    rows = list(
        Workspace.objects.filter(chat_id=chat_id, retired_at__isnull=True).values_list(
            "bot_chain_limit", "discuss_answers"
        )
    )
    if not rows:
        return ChatPolicy(chain_limit=DEFAULT_CHAIN_LIMIT, answers=Workspace.DiscussAnswers.ONE)
    each = all(answers == Workspace.DiscussAnswers.EACH for _, answers in rows)
    return ChatPolicy(
        chain_limit=min(limit for limit, _ in rows),
        answers=Workspace.DiscussAnswers.EACH if each else Workspace.DiscussAnswers.ONE,
    )


def mentioned_peer_bots(*, parsed: ParsedMessage, peers: list[Bot]) -> list[Bot]:
    """Pure: the hub bots a message @-mentions, matched on the bot's open_id or, since open_ids are per app and a
    bot's id as another app sees it is not stored, on its display name (Feishu puts the name in the mention)."""
    found = []
    for peer in peers:
        for mention in parsed.mentions:
            if (peer.feishu_bot_open_id and mention.open_id == peer.feishu_bot_open_id) or (
                mention.name and mention.name == peer.name
            ):
                found.append(peer)
                break
    return found


@dataclass(frozen=True)
class Candidate:
    """One bot a message activated, as the pick's rule sees it."""

    slug: str
    name: str
    reason: str  # its judge's reason ("" for an @all, where no judge ran)
    last_spoke_id: int  # the id of its newest reply in this thread (0: it has not spoken here)


@dataclass(frozen=True)
class Pick:
    slug: str
    rule: str
    reason: str


RULE_NAMED = "named_in_message"
RULE_QUIET = "spoke_least_recently"
RULE_FIRST = "first_by_slug"


def answer_pick(*, candidates: list[Candidate], message_text: str) -> Pick:
    """Pure (B3): which one of several activated bots answers, and why. Deterministic over the candidates, never
    over timing: the bot the message names (without an @, which would have addressed it), else the bot that spoke
    least recently in this thread (so the work spreads and a fresh voice answers), else the first by slug."""
    ordered = sorted(candidates, key=lambda candidate: candidate.slug)
    text = message_text.casefold()
    named = [candidate for candidate in ordered if candidate.name and candidate.name.casefold() in text]
    names = ", ".join(candidate.name for candidate in ordered)
    if len(named) == 1:
        winner = named[0]
        return Pick(winner.slug, RULE_NAMED, f"{winner.name} of {names}: the message names {winner.name}")
    pool = named or ordered
    quietest = min(pool, key=lambda candidate: (candidate.last_spoke_id, candidate.slug))
    if sum(1 for candidate in pool if candidate.last_spoke_id == quietest.last_spoke_id) == 1:
        detail = "has not spoken in this thread yet" if not quietest.last_spoke_id else "spoke least recently here"
        return Pick(quietest.slug, RULE_QUIET, f"{quietest.name} of {names}: {detail}")
    return Pick(
        quietest.slug, RULE_FIRST, f"{quietest.name} of {names}: none of them spoke here yet, the first by slug"
    )
