"""The playground's reads: the group's timeline with, beside each message, what every bot did with it.

One message, one bot: the event the intake stored (and what routing made of it), the discuss wake it joined and
the probe's judgement of that wake (speak or stay silent, and why), the turn it started, the turn's reply, its
context decision and the Feishu calls the sandbox recorded for it. A constant number of queries per poll,
whatever the length of the conversation (the newest MAX_MESSAGES messages are shown).
"""

from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.translation import gettext as _

from agents.models import Turn
from console.models import PlaygroundGroup, PlaygroundMember, PlaygroundMessage
from feishu.models import Arbitration, DiscussWake, InboundEvent, OutboundDelivery
from probe.models import ProbeJudgement

MAX_MESSAGES = 200
FINISHED_TURN_STATUSES = frozenset(
    {Turn.Status.DELIVERED, Turn.Status.DELIVERY_FAILED, Turn.Status.FAILED, Turn.Status.SKIPPED}
)


@dataclass(frozen=True)
class _Rows:
    events: dict[tuple[int, str], InboundEvent]
    turns: dict[tuple[int, str], Turn]
    wakes: dict[tuple[int, str], DiscussWake]
    # Keyed by nullable foreign keys (a judgement's wake, a delivery's turn), never None here: filtered by them.
    judgements: dict[int | None, ProbeJudgement]
    deliveries: dict[int | None, list[OutboundDelivery]]

    def for_message(
        self, *, bot_id: int | None, message_id: str
    ) -> tuple[InboundEvent | None, DiscussWake | None, Turn | None]:
        """One stand-in's event, wake and turn for one message; none for a member whose stand-in is gone (SET_NULL)."""
        if bot_id is None:
            return None, None, None
        key = (bot_id, message_id)
        return self.events.get(key), self.wakes.get(key), self.turns.get(key)


def _admin_url(name: str, pk: Any) -> str:
    return reverse(f"admin:{name}", args=[pk])


def gate_summary(
    *, judgement: ProbeJudgement | None, wake: DiscussWake | None, message_id: str = ""
) -> dict[str, Any] | None:
    """The probe's decision as the page shows it: speak or silent, its cause, the judge's reason.

    A debounced burst is judged once, on its newest message: the verdict and its reason are shown there; an
    earlier message of the burst says it was judged with the later ones (issue 27: the newest message's reason
    beside every message read as a wrong verdict of each)."""
    if judgement is None:
        if wake is None:
            return None
        return {
            "decision": "pending",
            "label": _("waiting for the probe"),
            "cause": "",
            "outcome": "",
            "outcome_label": "",
            "reason": "",
            "url": "",
        }
    speaks = judgement.activated
    if message_id and wake is not None and wake.last_message_id and message_id != wake.last_message_id:
        return {
            "decision": "burst",
            "label": _("judged together with the later messages of this burst"),
            "cause": "",
            "outcome": "",
            "outcome_label": "",
            "reason": "",
            "url": _admin_url("probe_probejudgement_change", judgement.pk),
        }
    return {
        "decision": "speak" if speaks else "silent",
        "label": _("speak") if speaks else _("stay silent"),
        "cause": judgement.cause,
        "outcome": judgement.outcome,
        "outcome_label": judgement.get_outcome_display(),
        "reason": judgement.reason,
        "url": _admin_url("probe_probejudgement_change", judgement.pk),
    }


def _turn_summary(turn: Turn | None, deliveries: list[OutboundDelivery]) -> dict[str, Any] | None:
    if turn is None:
        return None
    reply = turn.reply_message.content if turn.reply_message is not None else ""
    return {
        "id": turn.pk,
        "status": turn.status,
        "status_label": turn.get_status_display(),
        "is_finished": turn.status in FINISHED_TURN_STATUSES,
        "trigger": turn.trigger,
        "reply": reply,
        "error": turn.error[:300],
        "url": _admin_url("agents_turn_change", turn.pk),
        "context_url": (
            _admin_url("threadcontext_threadcontextdecision_explain", turn.context_decision_id)
            if turn.context_decision_id
            else ""
        ),
        "deliveries": [{"status": row.status, "content": row.content[:2000]} for row in deliveries],
    }


def _rows(*, sandbox_ids: list[int], chat_id: str, message_ids: list[str]) -> _Rows:
    events = {
        (event.bot_id, event.message_id): event
        for event in InboundEvent.objects.filter(bot_id__in=sandbox_ids, message_id__in=message_ids)
    }
    wanted = set(message_ids)
    wakes: dict[tuple[int, str], DiscussWake] = {}
    # A wake lists its messages in a JSON array (no portable "contains" on SQLite): read the chat's wakes once.
    for wake in DiscussWake.objects.filter(bot_id__in=sandbox_ids, chat_id=chat_id).order_by("id"):
        for message_id in wake.message_ids:
            if message_id in wanted:
                wakes[(wake.bot_id, message_id)] = wake
    wake_turn_ids = {wake.turn_id for wake in wakes.values() if wake.turn_id}
    turns = {
        (turn.bot_id, turn.source_message_id): turn
        for turn in Turn.objects.filter(bot_id__in=sandbox_ids, source_message_id__in=message_ids).select_related(
            "reply_message"
        )
    }
    by_pk = {turn.pk: turn for turn in turns.values()}
    missing = wake_turn_ids - set(by_pk)
    if missing:
        by_pk.update({turn.pk: turn for turn in Turn.objects.filter(pk__in=missing).select_related("reply_message")})
    for (bot_id, message_id), wake in wakes.items():
        if wake.turn_id and (bot_id, message_id) not in turns:
            turns[(bot_id, message_id)] = by_pk[wake.turn_id]
    judgements = {
        judgement.wake_id: judgement
        for judgement in ProbeJudgement.objects.filter(
            bot_id__in=sandbox_ids, wake_id__in=[wake.pk for wake in wakes.values()]
        ).order_by("id")
    }
    deliveries: dict[int | None, list[OutboundDelivery]] = {}
    for row in OutboundDelivery.objects.filter(turn_id__in=list(by_pk)).order_by("turn_id", "chunk_index", "id"):
        deliveries.setdefault(row.turn_id, []).append(row)
    return _Rows(events=events, turns=turns, wakes=wakes, judgements=judgements, deliveries=deliveries)


def playground_state_get(*, group: PlaygroundGroup) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data (the page polls it)."""
    members = list(group.members.select_related("bot", "sandbox_bot").order_by("id"))
    messages = list(group.messages.order_by("-id")[:MAX_MESSAGES])[::-1]
    sandbox_ids = [member.sandbox_bot_id for member in members if member.sandbox_bot_id]
    rows = _rows(sandbox_ids=sandbox_ids, chat_id=group.chat_id, message_ids=[m.message_id for m in messages])
    names = {member.bot_id: member.bot.name for member in members}
    together = _together(
        sandbox_names={m.sandbox_bot_id: m.bot.name for m in members if m.sandbox_bot_id},
        chat_id=group.chat_id,
        message_ids=[m.message_id for m in messages],
        turn_ids=[turn.pk for turn in rows.turns.values()],
    )
    return {
        "group": {"id": group.pk, "name": group.name, "kind": group.kind, "chat_id": group.chat_id},
        "bots": [_member_data(member) for member in members],
        "messages": [
            {
                **_message_data(message, members=members, rows=rows, names=names),
                "arbitration": together["arbitrations"].get(message.message_id),
            }
            for message in messages
        ],
        "handoffs": together["handoffs"],
    }


def _together(*, sandbox_names: dict[int, str], chat_id: str, message_ids: list[str], turn_ids: list[int]) -> dict:
    """B1/B3 beside the messages: who each answer handed off to (turn by turn), and which bot a pick chose and why."""
    arbitrations = {
        row.message_id: {"winner": sandbox_names.get(row.winner_bot_id or 0, ""), "reason": row.reason}
        for row in Arbitration.objects.filter(chat_id=chat_id, message_id__in=message_ids)
    }
    handoffs: dict[str, list[str]] = {}
    asked = list(Turn.objects.filter(asked_by_id__in=turn_ids).order_by("id")) if turn_ids else []
    for _depth in range(50):  # follow the chain (a hand-off's own hand-offs), as far as any brake allows
        if not asked:
            break
        for turn in asked:
            name = sandbox_names.get(turn.bot_id, "")
            handoffs.setdefault(str(turn.asked_by_id), []).append(f"{name} (turn {turn.pk}, {turn.status})")
        asked = list(Turn.objects.filter(asked_by_id__in=[turn.pk for turn in asked]).order_by("id"))
    return {"arbitrations": arbitrations, "handoffs": handoffs}


def _member_data(member: PlaygroundMember) -> dict[str, Any]:
    return {
        "id": member.bot_id,
        "name": member.bot.name,
        "slug": member.bot.slug,
        "reply_mode": member.reply_mode,
        "reply_mode_label": member.get_reply_mode_display(),
    }


def _message_data(
    message: PlaygroundMessage, *, members: list[PlaygroundMember], rows: _Rows, names: dict[int, str]
) -> dict[str, Any]:
    results = []
    for member in members:
        event, wake, turn = rows.for_message(bot_id=member.sandbox_bot_id, message_id=message.message_id)
        judgement = rows.judgements.get(wake.pk) if wake is not None else None
        results.append(
            {
                "bot_id": member.bot_id,
                "event_status": event.status if event is not None else "",
                "gate": gate_summary(judgement=judgement, wake=wake, message_id=message.message_id),
                "turn": _turn_summary(turn, rows.deliveries.get(turn.pk, []) if turn is not None else []),
            }
        )
    return {
        "id": message.pk,
        "message_id": message.message_id,
        "root_message_id": message.root_message_id,
        "sender": message.sender_name,
        "text": message.text,
        "mentions": [names[bot_id] for bot_id in message.mentioned_bot_ids if bot_id in names],
        "created_at": message.created_at.isoformat(),
        "results": results,
    }
