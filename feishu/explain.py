"""One screen per discuss wake or bridge turn: the gate, the context decision and the delivery (P11, C12).

A selector only: it reads the wake, its probe judgements, its turn, threadcontext's decision for that turn
and the outbound deliveries, and returns one plain dict the admin template (and a test) reads. It lives in the
bridge because it needs every app; probe and threadcontext stay ignorant of each other.
"""

from typing import Any

from agents.models import Bot, Turn, VoiceTranscription
from agents.principals import acts_for_in_words
from feishu.admission import REFUSED_OUTCOME_WORDS
from feishu.channel.brake import turn_chain
from feishu.channel.doclinks import DOCUMENTS_KEY
from feishu.inbound.catchup import MISSED_TEXT
from feishu.models import AnswerCandidate, Arbitration, DiscussWake, InboundEvent, OutboundDelivery
from probe.models import ProbeJudgement
from threadcontext.explain import decision_explain_data
from threadcontext.models import ThreadContextDecision, ThreadContextItem
from threadcontext.selection_types import text_preview


class ExplainNotFound(Exception):
    """Neither a wake nor a turn with that id exists."""


def _gate(judgements: list[ProbeJudgement]) -> list[dict[str, Any]]:
    return [
        {
            "judgement_id": judgement.pk,
            "ran": judgement.gate_ran,
            "cause": judgement.cause,
            "outcome": judgement.outcome,
            "activated": judgement.activated,
            "reason": judgement.reason,
            "error": judgement.error,
            "model": str(judgement.model) if judgement.model_id else "",
            # What was in force when the gate ran, recorded on the row (the bot's settings may have changed since).
            "probe_mode": judgement.probe_mode,
            "probe_model_name": judgement.probe_model_name,
            "input_tokens": judgement.input_tokens,
            "output_tokens": judgement.output_tokens,
            "latency_ms": judgement.duration_ms,
            "created_at": judgement.created_at,
        }
        for judgement in judgements
    ]


def _context(turn: Turn | None) -> dict[str, Any] | None:
    if turn is None or turn.context_decision_id is None:
        return None
    decision = ThreadContextDecision.objects.filter(pk=turn.context_decision_id).first()
    if decision is None:
        return None
    data = decision_explain_data(decision=decision)
    diagnostics = data["diagnostics"]
    return {
        **data,
        # What the one screen needs at a glance: what went in, what was left out and why, what was trimmed.
        "trimmed": {key: value for key, value in diagnostics.items() if "trim" in key or "truncat" in key},
    }


def _delivery(turn: Turn | None) -> list[dict[str, Any]]:
    if turn is None:
        return []
    return [
        {
            "id": delivery.pk,
            "chunk_index": delivery.chunk_index,
            "status": delivery.status,
            "chat_id": delivery.chat_id,
            "reply_to_message_id": delivery.reply_to_message_id,
            "reply_in_thread": delivery.reply_in_thread,
            "feishu_message_id": delivery.feishu_message_id,
            "attempts": delivery.attempts,
            "error": delivery.error,
            "chars": len(delivery.content),
            "sent_at": delivery.sent_at,
        }
        for delivery in OutboundDelivery.objects.filter(turn=turn).order_by("chunk_index")
    ]


def _arbitration(*, wake: DiscussWake | None, turn: Turn | None) -> dict[str, Any] | None:
    """B3: the pick of one answer this wake (or turn) took part in: who was picked, why, and this one's outcome."""
    candidacy = (
        AnswerCandidate.objects.select_related("arbitration__winner_bot").filter(wake=wake).first() if wake else None
    )
    arbitration = candidacy.arbitration if candidacy is not None else None
    if arbitration is None and turn is not None:
        arbitration = Arbitration.objects.select_related("winner_bot").filter(winner_turn=turn).first()
    if arbitration is None:
        return None
    return {
        "id": arbitration.pk,
        "message_id": arbitration.message_id,
        "winner": arbitration.winner_bot.name if arbitration.winner_bot is not None else "",
        "winner_turn_id": arbitration.winner_turn_id,
        "rule": arbitration.rule,
        "reason": arbitration.reason,
        "candidates": list(arbitration.candidates),
        "outcome": candidacy.outcome if candidacy is not None else AnswerCandidate.Outcome.PICKED,
    }


def _voice(*, bot, message_ids: list[str]) -> list[dict[str, Any]]:
    rows = VoiceTranscription.objects.filter(bot=bot, message_id__in=set(message_ids)).order_by("id")
    return [
        {
            "message_id": row.message_id,
            "status": row.get_status_display(),
            "reason": row.reason,
            "audio_seconds": row.audio_seconds,
        }
        for row in rows
    ]


def wake_messages(*, bridge_id: str, message_ids: list[str]) -> list[dict[str, str]]:
    """A wake's messages in its order, each with who wrote it and the start of its text (from this bot's context
    items; a message the hub kept no item of shows its id alone). One query through the items' message index."""
    found: dict[str, tuple[str, str]] = {}
    rows = ThreadContextItem.objects.filter(bridge_id=bridge_id, message_id__in=set(message_ids)).order_by("id")
    for message_id, author, text in rows.values_list("message_id", "author_label", "text"):
        found.setdefault(message_id, (author, text_preview(text)))
    return [
        {
            "message_id": message_id,
            "author": found.get(message_id, ("", ""))[0],
            "preview": found.get(message_id, ("", ""))[1],
        }
        for message_id in message_ids
    ]


def _records(
    *, wake_id: int | None, turn_id: int | None, event_id: int | None
) -> tuple[DiscussWake | None, Turn | None, Bot, InboundEvent | None]:
    """The wake, turn, bot and inbound event the page is about, from whichever id was given."""
    wake = None
    turn = None
    event = None
    if wake_id is not None:
        wake = DiscussWake.objects.select_related("bot", "turn").filter(pk=wake_id).first()
        if wake is None:
            raise ExplainNotFound(f"No discuss wake {wake_id}.")
        return wake, wake.turn, wake.bot, None
    if turn_id is not None:
        turn = Turn.objects.select_related("bot").filter(pk=turn_id).first()
        if turn is None:
            raise ExplainNotFound(f"No turn {turn_id}.")
    elif event_id is not None:
        # D2: one received message, e.g. a request the catch-up read too late to answer (no wake, no turn).
        event = InboundEvent.objects.select_related("bot").filter(pk=event_id).first()
        if event is None:
            raise ExplainNotFound(f"No inbound event {event_id}.")
        turn = Turn.objects.select_related("bot").filter(bot=event.bot, source_message_id=event.message_id).first()
        if turn is None:
            return None, None, event.bot, event
    else:
        raise ExplainNotFound("Give a wake id, a turn id or an inbound event id.")
    wake = DiscussWake.objects.filter(turn=turn).first()
    return wake, turn, (wake.bot if wake is not None else turn.bot), event


def _missed(*, bot: Bot, event: InboundEvent | None, turn: Turn | None) -> str:
    """D2: the sentence for a request recorded as missed (read by the catch-up past the answer window), or ""."""
    rows = InboundEvent.objects.filter(bot=bot, status=InboundEvent.Status.IGNORED, error=MISSED_TEXT)
    if event is not None:
        rows = rows.filter(pk=event.pk)
    elif turn is not None and turn.source_message_id:
        rows = rows.filter(message_id=turn.source_message_id)
    else:
        return ""
    return MISSED_TEXT if rows.exists() else ""


def wake_explain_data(
    *, wake_id: int | None = None, turn_id: int | None = None, event_id: int | None = None
) -> dict[str, Any]:
    """Everything about one wake (and the turn it started), about one turn (and the wake behind it, if any), or
    about one inbound event (and the turn it started, if any)."""
    wake, turn, bot, event = _records(wake_id=wake_id, turn_id=turn_id, event_id=event_id)
    judgements = ProbeJudgement.objects.select_related("model")
    if wake is not None:
        judgements = judgements.filter(wake_id=wake.pk)
    elif turn is not None:
        judgements = judgements.filter(turn=turn)
    else:
        judgements = judgements.none()  # a message that started nothing was judged by nothing
    return {
        # D2: "this request arrived while the hub was down and was not answered", for a request recorded as missed.
        "missed": _missed(bot=bot, event=event, turn=turn),
        "event": None
        if event is None
        else {
            "id": event.pk,
            "message_id": event.message_id,
            "status": event.status,
            # U2: why a door refused it, in words (empty for an event that went on to a turn or a wake).
            "refused": str(REFUSED_OUTCOME_WORDS.get(event.error, "")),
        },
        "bot": {"id": bot.pk, "name": bot.name, "slug": bot.slug, "probe_mode": bot.discuss_probe_mode},
        "wake": None
        if wake is None
        else {
            "id": wake.pk,
            "chat_id": wake.chat_id,
            "root_msg_id": wake.root_msg_id,
            "status": wake.status,
            "message_ids": list(wake.message_ids),
            "messages": wake_messages(bridge_id=bot.bridge_id, message_ids=list(wake.message_ids)),
            "first_message_at": wake.first_message_at,
            "due_at": wake.due_at,
            "deadline_at": wake.deadline_at,
            "attempts": wake.attempts,
            "error": wake.error,
        },
        # No judgement for a turn means no gate: DMs, mentions and REST never run it (P1).
        "gate": _gate(list(judgements.order_by("id"))),
        "turn": None
        if turn is None
        else {
            "id": turn.pk,
            "trigger": turn.trigger,
            "status": turn.status,
            "source_message_id": turn.source_message_id,
            "attempts": turn.attempts,
            "error": turn.error,
            "usage": turn.usage,
            "duration_ms": turn.duration_ms,
            "user_message_id": turn.user_message_id,
            "reply_message_id": turn.reply_message_id,
            "context_decision_id": turn.context_decision_id,
            # U1/U2: who it acts for, through which door, and the rule that admitted them.
            "acts_for": acts_for_in_words(turn),
            "admission": turn.admission or {},
        },
        "context": _context(turn),
        "delivery": _delivery(turn),
        "arbitration": _arbitration(wake=wake, turn=turn),
        # B1/B2: the hand-offs that led to this turn, the person's request first ("asked by Planner in turn N").
        "chain": turn_chain(turn=turn) if turn is not None and turn.asked_by_id else [],
        # H3: what came of the voice messages the judge and the turn read (transcribed, or why not, and seconds).
        "voice": _voice(
            bot=bot,
            message_ids=(list(wake.message_ids) if wake is not None else [])
            + ([turn.source_message_id] if turn is not None else []),
        ),
        # U3: each document the request linked: as whom it was read (the bot, or nobody) and why.
        "documents": list((turn.channel_state or {}).get(DOCUMENTS_KEY, [])) if turn is not None else [],
        # B1, the asking side: the bots this turn's answer handed off to, and their turns.
        "handed_to": [
            {"turn_id": handed.pk, "bot": handed.bot.name, "status": handed.status, "error": handed.error}
            for handed in (turn.handoffs.select_related("bot").order_by("id") if turn is not None else [])
        ],
    }
