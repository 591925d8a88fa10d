"""Reads for threads and messages: visibility per user, /history pages (mask & 1), context (mask & 2).

History uses keyset pagination on the primary key (V5): a page is `id < cursor ORDER BY id DESC LIMIT n+1`
on the (thread, id) index, so a deep page costs what the first does and a message inserted between two page
fetches never shifts a later page (it has a larger id than every cursor already handed out).
"""

import base64
import binascii
import json
from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import F, QuerySet

from agents.models import Bot, Message, Thread, Turn
from agents.services.turns.assembly import context_messages_upper_bound, primary_input_build
from agents.visibility import CONTEXT_ASSEMBLY, UI_HISTORY
from core.exceptions import ApplicationError, NotFoundError
from core.permissions import staff_may

HISTORY_PAGE_SIZE_DEFAULT = 50
HISTORY_PAGE_SIZE_MAX = 200
MAX_MESSAGE_ID = 2**63 - 1  # a BigAutoField; a cursor past it was never handed out


class InvalidCursorError(ApplicationError):
    pass


class InvalidPageSizeError(ApplicationError):
    pass


class UnknownBotError(ApplicationError):
    pass


@dataclass(frozen=True)
class HistoryPage:
    messages: list[Message]  # newest first
    next_cursor: str | None  # None on the last page


# U6: what seeing (or acting on) another owner's rows takes, per REST action: Django model permissions, held by a
# staff user (a superuser holds them all). The owner of a bot needs none of them for its own rows.
VIEW_BOT = ("agents.view_bot",)
VIEW_THREAD = ("agents.view_thread",)
START_THREAD = ("agents.view_bot", "agents.add_thread")
POST_MESSAGE = ("agents.view_thread", "agents.add_message")
VIEW_TURN = ("agents.view_turn",)
# Deciding a tool call lets the tool run (or not) in someone else's turn: a change of the approval, on a turn the
# decider may read (the answer is the turn).
DECIDE_APPROVAL = ("agents.view_turn", "agents.change_toolapproval")
# Usage is each bot's turns priced: the bots and their turns.
VIEW_USAGE = ("agents.view_bot", "agents.view_turn")


def _visible_to(
    rows: QuerySet, *, user: User | AnonymousUser, owner_lookup: str, permissions: tuple[str, ...]
) -> QuerySet:
    """The one visibility rule (ARCHITECTURE §7, §12.0 U6): a user sees the rows of the bots they own; every owner's
    rows only a superuser or staff holding `permissions` (core.permissions); anonymous none."""
    if not user.is_authenticated:
        return rows.none()
    if staff_may(user, permissions):
        return rows
    return rows.filter(**{owner_lookup: user})


def bot_list(*, user: User | AnonymousUser, permissions: tuple[str, ...] = VIEW_BOT) -> QuerySet[Bot]:
    """The hub bots the user may read (their own; staff with `permissions`: any), the playground's stand-ins left
    out, by slug."""
    bots = Bot.objects.filter(is_sandbox=False)
    return _visible_to(bots, user=user, owner_lookup="owner", permissions=permissions).order_by("slug")


def bot_get_for_user(*, user: User | AnonymousUser, slug: str) -> Bot:
    """A bot the user may start threads on (their own; staff who may add threads: any). Unknown and foreign bots
    look the same."""
    bots = _visible_to(Bot.objects.select_related("owner"), user=user, owner_lookup="owner", permissions=START_THREAD)
    try:
        return bots.get(slug=slug)
    except Bot.DoesNotExist:
        raise UnknownBotError(f"No bot {slug!r} that you own.", extra={"bot": slug[:100]}) from None


def user_owns_bot_profile(user: User | AnonymousUser, bot_profile: str, /) -> bool:
    """Whether the user owns the bot with this slug (the owner's part of the context decisions' rule; threadcontext
    asks core.permissions for the staff part itself).

    Positional, because it is the plug for AMUX_CONTEXT_DECISION_ACCESS_CHECK (threadcontext calls
    `check(user, bot_profile)` by dotted path: it cannot import agents).
    """
    if not user.is_authenticated:
        return False
    return Bot.objects.filter(slug=bot_profile, owner=user).exists()


def thread_list(*, user: User | AnonymousUser, permissions: tuple[str, ...] = VIEW_THREAD) -> QuerySet[Thread]:
    """Threads the user may see: those of bots they own; staff holding `permissions`: all."""
    threads = Thread.objects.select_related("bot", "bot__owner")
    return _visible_to(threads, user=user, owner_lookup="bot__owner", permissions=permissions).order_by("-id")


def turn_get(*, user: User | AnonymousUser, turn_id: int, permissions: tuple[str, ...] = VIEW_TURN) -> Turn:
    """A turn of a bot the user owns (staff holding `permissions`: any); NotFoundError otherwise, so ids do not
    leak."""
    turns = Turn.objects.select_related("bot", "reply_message")
    try:
        return _visible_to(turns, user=user, owner_lookup="bot__owner", permissions=permissions).get(pk=turn_id)
    except Turn.DoesNotExist:
        raise NotFoundError("Turn not found.", extra={"turn_id": turn_id}) from None


def turn_decision_allowed(*, user: User | AnonymousUser, turn: Turn) -> bool:
    """Whether the user may decide the turn's tool calls (H1/U6): the bot's owner, or staff holding DECIDE_APPROVAL.
    Asked after turn_get found the turn visible, so a refusal here may say why (a 403, not a 404)."""
    turns = Turn.objects.filter(pk=turn.pk)
    return _visible_to(turns, user=user, owner_lookup="bot__owner", permissions=DECIDE_APPROVAL).exists()


def thread_get(*, user: User | AnonymousUser, thread_id: int, permissions: tuple[str, ...] = VIEW_THREAD) -> Thread:
    """The thread, or NotFoundError when it does not exist or the user may not see it (no id leaks)."""
    try:
        return thread_list(user=user, permissions=permissions).get(pk=thread_id)
    except Thread.DoesNotExist:
        raise NotFoundError("Thread not found.", extra={"thread_id": thread_id}) from None


def _messages_with_bit(*, thread: Thread, bit: int) -> QuerySet[Message]:
    # A bitwise AND in SQL works on SQLite (&) and PostgreSQL (&) alike; the index (thread, id) drives the walk.
    return (
        Message.objects.filter(thread=thread)
        .alias(visible_bits=F("visibility_mask").bitand(bit))
        .filter(visible_bits__gt=0)
    )


def history_cursor_encode(*, before_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": before_id}).encode()).decode().rstrip("=")


def history_cursor_decode(*, cursor: str) -> int:
    """The message id the page starts below; InvalidCursorError for anything we did not hand out."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        before_id = json.loads(raw)["before"]
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise InvalidCursorError("Malformed cursor.", extra={"cursor": cursor[:100]}) from None
    if type(before_id) is not int or not 0 < before_id <= MAX_MESSAGE_ID:
        raise InvalidCursorError("Malformed cursor.", extra={"cursor": cursor[:100]})
    return before_id


def message_history_page(
    *, thread: Thread, cursor: str | None = None, page_size: int = HISTORY_PAGE_SIZE_DEFAULT
) -> HistoryPage:
    """One page of the thread's /history (mask & 1, V3), newest first, keyset on id (V5)."""
    if not 1 <= page_size <= HISTORY_PAGE_SIZE_MAX:
        raise InvalidPageSizeError(
            f"page_size must be between 1 and {HISTORY_PAGE_SIZE_MAX}.",
            extra={"page_size": page_size, "max": HISTORY_PAGE_SIZE_MAX},
        )
    messages = _messages_with_bit(thread=thread, bit=UI_HISTORY)
    if cursor:
        messages = messages.filter(id__lt=history_cursor_decode(cursor=cursor))
    rows = list(messages.order_by("-id")[: page_size + 1])
    has_more = len(rows) > page_size
    rows = rows[:page_size]
    next_cursor = history_cursor_encode(before_id=rows[-1].pk) if has_more else None
    return HistoryPage(messages=rows, next_cursor=next_cursor)


# What assembly reads of a context message (agents.services.turns.assembly): a turn loads only these. A full row
# costs twice as much CPU to load (its usage JSON, timestamps and the rest converted per row; 39 vs 18 µs per
# message on SQLite), and a turn loads up to a window's worth of them (issue 11).
ASSEMBLY_FIELDS = ("id", "thread_id", "kind", "content", "prompt")


def context_messages_list(
    *, thread: Thread, before_id: int | None = None, limit: int | None = None, assembly_fields_only: bool = False
) -> list[Message]:
    """Exactly the messages assembled into the model's context (mask & 2, V3), oldest first.

    `before_id` keeps only messages older than that id (e.g. the turn's own user message); `limit` keeps only
    the newest `limit` of them (still returned oldest first), so a long thread is trimmed in SQL, not in Python.
    `assembly_fields_only` loads only ASSEMBLY_FIELDS (the turn's case; the other fields are deferred).
    """
    messages = _messages_with_bit(thread=thread, bit=CONTEXT_ASSEMBLY)
    if assembly_fields_only:
        messages = messages.only(*ASSEMBLY_FIELDS)
    if before_id is not None:
        messages = messages.filter(id__lt=before_id)
    if limit is None:
        return list(messages.order_by("id"))
    return list(reversed(messages.order_by("-id")[:limit]))


def answer_anchors(*, thread_id: int, reply_ids: list[int]) -> dict[int, int]:
    """reply id -> the id of the last message that reply answered (its turn's request, or the newest request the
    turn collected, O2): where the reply belongs in the conversation (O3). Replies without a turn are left out."""
    if not reply_ids:
        return {}
    rows = list(
        Turn.objects.filter(thread_id=thread_id, reply_message_id__in=reply_ids).values_list(
            "reply_message_id", "user_message_id", "channel_state"
        )
    )
    collected_ids = [int(i) for _, _, state in rows for i in (state or {}).get("collected", [])]
    collected = dict(
        Turn.objects.filter(pk__in=collected_ids, user_message_id__isnull=False).values_list("pk", "user_message_id")
    )
    anchors = {}
    for reply_id, user_message_id, state in rows:
        asked = [user_message_id or 0] + [collected.get(int(i), 0) for i in (state or {}).get("collected", [])]
        anchors[reply_id] = max(asked) or reply_id
    return anchors


def conversation_ordered(*, thread_id: int, messages: list[Message]) -> list[Message]:
    """The messages as a conversation (O3): each answer right after the message it answered, the rest by id."""
    anchors = answer_anchors(
        thread_id=thread_id, reply_ids=[m.pk for m in messages if m.kind == Message.Kind.AGENT_REPLY]
    )
    if not anchors:
        return messages
    return sorted(messages, key=lambda m: (anchors[m.pk], 1, m.pk) if m.pk in anchors else (m.pk, 0, m.pk))


def context_messages_assembled(*, thread: Thread) -> list[Message]:
    """Exactly the context messages a turn of this thread would be given now (V3, T3), oldest first.

    The turn's own path: the mask & 2 messages, no more of them than could fit the bot's primary model window, then
    the newest that fit its token budget after the system prompt (the next request's own text, unknown here, takes
    its share when a turn runs). Bounded by the window, never by the thread's length.
    """
    model = thread.bot.primary_model
    candidates = conversation_ordered(
        thread_id=thread.pk,
        messages=context_messages_list(
            thread=thread, limit=context_messages_upper_bound(context_window=model.context_window)
        ),
    )
    primary = primary_input_build(
        model=model, system_prompt=thread.bot.system_prompt, context=candidates, user_prompt=""
    )
    kept = set(primary.context_message_ids)
    return [message for message in candidates if message.pk in kept]
