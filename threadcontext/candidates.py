"""The selector's one bounded query: the candidate items of a thread for one bot, with their pins and the
conversation's clear boundary (threadcontext.selectors.context_package_build selects among them)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Subquery

from threadcontext.models import ContextClear, ContextPin, ThreadContextItem
from threadcontext.selection_types import SUMMARY_COVERS_THROUGH_KEY
from threadcontext.trimming import MODE_SHARED, CandidateItem

_CANDIDATE_COLUMNS = ("id", "item_type", "bridge_id", "message_id", "author_label", "text", "metadata")

# The query is a UNION ALL of small branches, each an index range scan of one thread and one item type
# ((chat_id, root_msg_id, item_type, -id)) read newest first and stopped by its LIMIT:
#   this bot's topic root (one row) | this bot's human messages (shared) | other bots' agent outputs
#   | ruled out, for explain only: this bot's own outputs, and its human messages in owner_only (newest few).
# Why the LIMITs are enough for a correct selection: the newest `item_limit` eligible rows of the thread are among
# the newest `item_limit` rows of each eligible branch, so the merge of the branches always holds them. Rows that
# are never eligible (own outputs, other bridges' copies of human messages and roots, out-of-mode types) are
# filtered in SQL, so however many a thread holds they cannot crowd an eligible row out. The two exclusions the
# selector may still make among eligible rows (the current request's own message; a bot-sent root that is also
# that bot's agent_output) both concern the topic root's message, the oldest of the thread: when it is inside a
# branch's window, that branch already holds all its rows. +1 tells "trimmed by the item limit" apart from "the
# thread had exactly that many"; +1 is spare.
# Cost: each branch reads at most its LIMIT matching rows; the human branch skips other bridges' copies (at most
# one per other bot in the group per message) and the outputs branch skips this bot's own outputs newer than the
# rows it returns. Neither depends on how long the thread is.
ELIGIBLE_SLACK = 2
# Ruled-out rows are read only to explain them, newest first and bounded; older ones are simply not listed.
RULED_OUT_LIMIT = 20
# K2: at most this many pins per conversation (`/context pin` refuses more); the pin branch reads them all.
MAX_PINS = 50
SUMMARY_WINDOW = 2


def _steering_annotations(*, bridge_id: str, chat_id: str, root_msg_id: str) -> dict:
    """Issue 25: each candidate row carries its pin (this bot's pin id, or NULL) and the conversation's newest
    clear boundary, so pins and clears ride in the selector's one query (an index lookup each, per bounded row)."""
    pin = ContextPin.objects.filter(item_id=OuterRef("id"), bridge_id=bridge_id).values("id")[:1]
    clear = (
        ContextClear.objects.filter(bridge_id=bridge_id, chat_id=chat_id, root_msg_id=root_msg_id)
        .order_by("-id")
        .values("through_item_id")[:1]
    )
    return {"pin_order": Subquery(pin), "cleared_through": Subquery(clear)}


def _newest_sql(queryset: QuerySet, limit: int, annotations: dict) -> tuple[str, tuple]:
    sliced = (
        queryset.annotate(**annotations).order_by("-id").values_list(*_CANDIDATE_COLUMNS, *annotations.keys())[:limit]
    )
    sql, params = sliced.query.sql_with_params()
    return sql, tuple(params)


def _candidate_branches(
    *, bridge_id: str, chat_id: str, root_msg_id: str, mode: str, item_limit: int
) -> list[tuple[Q, int]]:
    """(filter, LIMIT) per branch of the candidate query, in the order they are unioned."""
    window = item_limit + ELIGIBLE_SLACK
    topic_root = ThreadContextItem.ItemType.TOPIC_ROOT
    human = ThreadContextItem.ItemType.HUMAN_MESSAGE
    output = ThreadContextItem.ItemType.AGENT_OUTPUT
    branches = [
        (Q(item_type=topic_root, bridge_id=bridge_id), window),
        (Q(item_type=output) & ~Q(bridge_id=bridge_id), window),
        (Q(item_type=output, bridge_id=bridge_id), RULED_OUT_LIMIT),
    ]
    if mode == MODE_SHARED:
        branches.append((Q(item_type=human, bridge_id=bridge_id), window))
    else:
        branches.append((Q(item_type=human, bridge_id=bridge_id), RULED_OUT_LIMIT))
    # K3: this bot's newest summaries (the newest is injected; one more is read to explain it as superseded).
    summary = ThreadContextItem.ItemType.SUMMARY
    branches.append((Q(item_type=summary, bridge_id=bridge_id), SUMMARY_WINDOW))
    # K2: this bot's pins in this conversation, however old (read from the pin table's conversation index).
    pins = ContextPin.objects.filter(bridge_id=bridge_id, chat_id=chat_id, root_msg_id=root_msg_id)
    branches.append((Q(id__in=Subquery(pins.order_by("-id").values("item_id")[:MAX_PINS])), MAX_PINS))
    return branches


# Stand-ins for a request's own values while its query's shape is compiled (no chat, root or bridge id holds NUL).
_CHAT_ID, _ROOT_MSG_ID, _BRIDGE_ID = "\x00chat_id", "\x00root_msg_id", "\x00bridge_id"
# The newest item a request may see (O3: nothing that arrived after the request): no item id comes near this
# stand-in, which is also the value of a request without a cutoff.
_UP_TO_ITEM_ID = 2**62 + 7


@functools.lru_cache(maxsize=64)
def _candidates_sql(*, vendor: str, mode: str, item_limit: int) -> tuple[str, tuple]:
    """The candidate query of one shape (database, mode, limit), compiled once per process: its SQL, and its
    parameters with the stand-ins where a request's values go. The ORM's compile of the four branches cost ~2 ms
    of CPU per turn (issue 11); the SQL is the same for every request of a shape, only those three values differ."""
    thread = ThreadContextItem.objects.filter(chat_id=_CHAT_ID, root_msg_id=_ROOT_MSG_ID, id__lte=_UP_TO_ITEM_ID)
    parts: list[str] = []
    params: tuple = ()
    annotations = _steering_annotations(bridge_id=_BRIDGE_ID, chat_id=_CHAT_ID, root_msg_id=_ROOT_MSG_ID)
    branches = _candidate_branches(
        bridge_id=_BRIDGE_ID, chat_id=_CHAT_ID, root_msg_id=_ROOT_MSG_ID, mode=mode, item_limit=item_limit
    )
    for index, (branch, limit) in enumerate(branches):
        branch_sql, branch_params = _newest_sql(thread.filter(branch), limit, annotations)
        parts.append(f"SELECT * FROM ({branch_sql}) branch_{index}")
        params += branch_params
    return " UNION ALL ".join(parts), params


@dataclass(frozen=True)
class Candidates:
    """What the selector's one query read: the candidate items (each once) and the conversation's clear boundary."""

    items: list[CandidateItem]
    cleared_through_id: int = 0


def context_candidates_load(
    *, bridge_id: str, mode: str, chat_id: str, root_msg_id: str, item_limit: int, up_to_item_id: int | None = None
) -> Candidates:
    """The selector's ONE query (a UNION ALL of bounded newest-first branches, see above); any order out.
    `up_to_item_id`: only items up to that id (what had arrived when the request was made)."""
    sql, shape_params = _candidates_sql(vendor=connection.vendor, mode=mode, item_limit=item_limit)
    values: dict = {_CHAT_ID: chat_id, _ROOT_MSG_ID: root_msg_id, _BRIDGE_ID: bridge_id}
    if up_to_item_id is not None:
        values[_UP_TO_ITEM_ID] = up_to_item_id
    params = tuple(
        values.get(param, param) if isinstance(param, str) or param == _UP_TO_ITEM_ID else param
        for param in shape_params
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    candidates: dict[int, CandidateItem] = {}
    cleared_through_id = 0
    for item_id, item_type, item_bridge, message_id, author_label, text, metadata, pin_id, cleared in rows:
        cleared_through_id = max(cleared_through_id, int(cleared or 0))
        if item_id in candidates:  # a pinned item is also read by its type's branch
            continue
        if isinstance(metadata, str):  # SQLite hands JSON back as text; PostgreSQL's driver decodes jsonb
            metadata = json.loads(metadata or "{}")
        candidates[item_id] = CandidateItem(
            id=item_id,
            item_type=item_type,
            bridge_id=item_bridge,
            message_id=message_id,
            author_label=author_label,
            text=text,
            truncated=bool((metadata or {}).get("truncated")),
            pin_order=int(pin_id or 0),
            covers_through_id=int((metadata or {}).get(SUMMARY_COVERS_THROUGH_KEY) or 0),
        )
    return Candidates(items=list(candidates.values()), cleared_through_id=cleared_through_id)
