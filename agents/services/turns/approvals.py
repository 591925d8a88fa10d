"""Approvals of risky tool calls (ARCHITECTURE H1): the gate the tool loop asks, the decision, the timeout.

    gate = approval_gate(turn=turn)            # handed to agents.tools.loop through turn_tools_run
    approval_decide(approval=..., outcome=..., via=..., decided_by=...)   # a press, the REST API, the sweeper
    approvals_sweep(now=...)                   # timeouts are denials; decided turns whose resume was lost

The pause is durable: a ToolApproval row (the call's slot and the whole step as the model asked it) and the turn's
status `awaiting_approval`; no worker waits. A decision is one ToolApprovalDecision row, one-to-one with its
approval, so of two presses at once the database keeps the first and the second gets the first's answer. After the
decision commits the turn is enqueued; the runner claims it, the loop replays the recorded calls (never run again,
M2) and finishes the paused step through the gate, which now finds the decision. Should that enqueue be lost (the
process died after the commit), the sweeper enqueues every awaiting turn whose approval was decided a while ago.

Who may decide is the channel's rule (Feishu: the turn's principal, the chat's owner or the bot's owner; REST: the
bot's owner or staff allowed to change approvals), and only before the deadline (U5): a person's decision after
`expires_at` is refused as expired, and the deadline's denial is recorded in its place, as the sweeper would (the
one-to-one key keeps it once). "Allow in this conversation" is granted to the turn's principal, in the thread and
the part of it the channel names (a Feishu topic: a group-scope session spans every topic), never wider.
"""

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from agents.llm.base import ToolCall
from agents.models import McpServer, ToolApproval, ToolApprovalDecision, Turn, TurnToolCall
from agents.principals import Principal, principal_from_turn
from agents.secrets import hub_secrets
from agents.services.enqueue import turn_enqueue
from agents.services.turns.channels import ApprovalPlace, channel_for
from agents.tools.loop import ApprovalPending, Gate, LoopTool
from core.redaction import redacted, redacted_arguments

logger = logging.getLogger(__name__)

DENIED_TEXT = "Tool {name!r} was not run: the person denied this call."
TIMED_OUT_TEXT = "Tool {name!r} was not run: the person denied this call (no decision within {seconds} s)."
# A decided approval whose turn is still awaiting this long after the decision lost its enqueue: the sweeper resumes.
RESUME_AFTER_SECONDS = 60
# What a card or an API answer shows of the arguments: each string value, and the whole, cut to these.
SHOWN_VALUE_CHARS = 200
SHOWN_ARGUMENTS_CHARS = 1500
Outcome = ToolApprovalDecision.Outcome


def arguments_shown(arguments: Any, *, secrets: tuple[str, ...] = ()) -> str:
    """The call's arguments as a person reads them (pure): every secret redacted, in each value, across values
    (withheld whole: core.redaction.redacted_arguments) and in the rendered text; long values and the whole cut."""

    def cut(value: Any) -> Any:
        if isinstance(value, str) and len(value) > SHOWN_VALUE_CHARS:
            return value[: SHOWN_VALUE_CHARS - 1] + "…"
        if isinstance(value, dict):
            return {key: cut(item) for key, item in value.items()}
        if isinstance(value, list):
            return [cut(item) for item in value]
        return value

    text = redacted(
        json.dumps(cut(redacted_arguments(arguments, secrets=secrets)), ensure_ascii=False, indent=1), secrets=secrets
    )
    return text if len(text) <= SHOWN_ARGUMENTS_CHARS else text[: SHOWN_ARGUMENTS_CHARS - 1] + "…"


def decision_of(approval: ToolApproval) -> ToolApprovalDecision | None:
    try:
        return approval.decision
    except ObjectDoesNotExist:
        return None


def _same_principal(principal: Principal) -> Q | None:
    """Approvals whose turn acts for `principal`: by the id that names them most narrowly (a Feishu open_id is per
    app, and a thread is one bot's), else their union_id, else their hub user; None for nobody (no grant is theirs)."""
    if principal.open_id:
        return Q(approval__turn__principal_open_id=principal.open_id)
    if principal.union_id:
        return Q(approval__turn__principal_union_id=principal.union_id)
    if principal.user_id is not None:
        return Q(approval__turn__principal_user_id=principal.user_id)
    return None


def conversation_allows(*, turn: Turn, place: ApprovalPlace, server: str, tool: str) -> bool:
    """Whether `server`'s `tool` was allowed for this conversation to the person `turn` acts for (U5): in its thread
    and the part of it `place` names (a Feishu topic), for that principal only. Another person, another topic or
    another thread still gets asked."""
    principal = _same_principal(principal_from_turn(turn))
    if principal is None:
        return False
    return ToolApprovalDecision.objects.filter(
        principal,
        approval__turn__thread_id=turn.thread_id,
        approval__topic=place.topic[:100],
        approval__server=server,
        approval__tool=tool,
        outcome=Outcome.ALLOW_CONVERSATION,
    ).exists()


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def approval_gate(*, turn: Turn, servers: dict[str, McpServer]) -> Gate:
    """The loop's gate for `turn`: a decided call runs (or is denied), an undecided one pauses the turn."""

    def gate(call: ToolCall, tool: LoopTool, step: int, index: int, step_calls) -> str | None:
        approval = ToolApproval.objects.select_related("decision").filter(turn=turn, step=step, index=index).first()
        if approval is None:
            place = channel_for(thread=turn.thread).approval_place(turn=turn)
            if conversation_allows(turn=turn, place=place, server=tool.server, tool=tool.tool):
                return None
            approval = _approval_create(
                turn=turn, call=call, tool=tool, step=step, index=index, step_calls=step_calls, place=place
            )
            decision = None
        else:
            decision = decision_of(approval)
        if decision is None:
            raise ApprovalPending(approval_id=approval.pk)
        if decision.allows:
            return None
        if decision.outcome == Outcome.TIMEOUT:
            server = servers.get(approval.server)
            seconds = server.approval_timeout_seconds if server is not None else 0
            return TIMED_OUT_TEXT.format(name=call.name, seconds=seconds)
        return DENIED_TEXT.format(name=call.name)

    return gate


def _approval_create(
    *, turn: Turn, call: ToolCall, tool: LoopTool, step: int, index: int, step_calls, place: ApprovalPlace
) -> ToolApproval:
    server = McpServer.objects.filter(bot_id=turn.bot_id, name=tool.server).first()
    timeout = server.approval_timeout_seconds if server is not None else 600
    arguments = call.arguments if isinstance(call.arguments, dict) else {"raw": str(call.arguments)}
    # Who asked is the person the turn acts for (U1): a hand-off's message was written by a bot, the chain's person
    # asked. A REST user's name, as before, when the principal has no Feishu id.
    author = turn.user_message.author if turn.user_message is not None else ""
    requester = turn.principal_open_id or turn.principal_union_id or author
    approval, _ = ToolApproval.objects.get_or_create(
        turn=turn,
        step=step,
        index=index,
        defaults={
            "call_id": call.id[:200],
            "server": tool.server,
            "tool": tool.tool[:200],
            "arguments": redacted_arguments(arguments, secrets=hub_secrets()),
            # The calls run with what the model asked (the model never sees a hub secret: prompts are redacted).
            "step_calls": [_call_json(c) for c in step_calls],
            "requested_by": requester[:200],
            "chat_id": place.chat_id[:64],
            "topic": place.topic[:100],
            "expires_at": timezone.now() + timedelta(seconds=timeout),
        },
    )
    return approval


def approval_pending_step(*, turn: Turn) -> tuple[int, list[ToolCall]] | None:
    """The step the turn paused in, when it is not finished: (step, its calls as the model asked them)."""
    latest = ToolApproval.objects.filter(turn=turn).order_by("-step", "-index").first()
    if latest is None:
        return None
    recorded = TurnToolCall.objects.filter(turn=turn, step=latest.step).count()
    if recorded >= len(latest.step_calls):
        return None
    calls = [ToolCall(name=c["name"], arguments=c["arguments"], id=c["id"]) for c in latest.step_calls]
    return latest.step, calls


@dataclass(frozen=True)
class Decided:
    decision: ToolApprovalDecision
    won: bool  # False: an earlier decision stands, `decision` is that one
    # U5: the person decided after the deadline; `decision` is the deadline's denial (recorded now, or before)
    expired: bool = False


def approval_is_expired(*, approval: ToolApproval, now: datetime) -> bool:
    """Whether a person's decision comes too late (U5): the card says no decision by `expires_at` is a denial."""
    return now >= approval.expires_at


def approval_decide(
    *,
    approval: ToolApproval,
    outcome: str,
    via: str,
    decided_by: str = "",
    event_id: str = "",
    now: datetime | None = None,
) -> Decided:
    """Record the decision unless one exists (the one-to-one key decides between racing presses), then, after
    commit, enqueue the turn and (for a decision not made on the card itself) let the channel update the card.

    A person's decision (a press, REST) after the deadline is refused (U5): the deadline's denial is recorded in its
    place, exactly as the sweeper records it, and the answer says `expired`."""
    if via != ToolApprovalDecision.Via.SWEEPER and approval_is_expired(approval=approval, now=now or timezone.now()):
        timed_out = _decision_record(
            approval=approval, outcome=Outcome.TIMEOUT, via=ToolApprovalDecision.Via.SWEEPER, came_via=via
        )
        logger.info(
            "late approval decision refused",
            extra={"turn_id": approval.turn_id, "approval_id": approval.pk, "via": via},
        )
        expired = timed_out.decision.outcome == Outcome.TIMEOUT  # else a person decided in time, racing this one
        return Decided(decision=timed_out.decision, won=False, expired=expired)
    return _decision_record(
        approval=approval, outcome=outcome, via=via, decided_by=decided_by, event_id=event_id, came_via=via
    )


def _decision_record(
    *, approval: ToolApproval, outcome: str, via: str, came_via: str, decided_by: str = "", event_id: str = ""
) -> Decided:
    """The one write of a decision. `came_via`: how the request came (a press is answered with the card itself, so
    the card is updated only for a decision that came another way: REST, the sweeper)."""
    try:
        with transaction.atomic():
            decision = ToolApprovalDecision.objects.create(
                approval=approval, outcome=outcome, via=via, decided_by=decided_by[:200], event_id=event_id[:64]
            )
    except IntegrityError:
        return Decided(decision=ToolApprovalDecision.objects.get(approval=approval), won=False)
    approval.decision = decision
    logger.info(
        "tool approval decided",
        extra={"turn_id": approval.turn_id, "approval_id": approval.pk, "outcome": outcome, "via": via},
    )
    turn_id = approval.turn_id
    transaction.on_commit(lambda: turn_enqueue(turn_id=turn_id))
    if came_via != ToolApprovalDecision.Via.CARD:
        transaction.on_commit(lambda: _card_update(approval=approval, decision=decision))
    return Decided(decision=decision, won=True)


def _card_update(*, approval: ToolApproval, decision: ToolApprovalDecision) -> None:
    turn = Turn.objects.select_related("bot", "thread").get(pk=approval.turn_id)
    try:
        channel_for(thread=turn.thread).approval_decided(turn=turn, approval=approval, decision=decision)
    except Exception:  # noqa: BLE001 - the decision stands; the card showing it is best effort
        logger.exception("approval card not updated", extra={"turn_id": turn.pk, "approval_id": approval.pk})


def approval_requested(*, turn: Turn, approval_id: int) -> ToolApproval:
    """The turn paused: mark it awaiting (only from running: a decision that came first keeps it resumable) and
    let the channel show the card (best effort; the approval stands without it, REST decides without a card)."""
    Turn.objects.filter(pk=turn.pk, status=Turn.Status.RUNNING).update(status=Turn.Status.AWAITING_APPROVAL)
    turn.status = Turn.Status.AWAITING_APPROVAL
    approval = ToolApproval.objects.get(pk=approval_id)
    logger.info("turn awaits approval", extra={"turn_id": turn.pk, "approval_id": approval.pk, "tool": approval.tool})
    if decision_of(approval) is None and not approval.card_message_id:
        try:
            channel_for(thread=turn.thread).approval_requested(turn=turn, approval=approval)
        except Exception:  # noqa: BLE001 - see above
            logger.exception("approval card not posted", extra={"turn_id": turn.pk, "approval_id": approval.pk})
    return approval


def approvals_sweep(*, now: datetime | None = None) -> int:
    """Deny every approval past its timeout, and enqueue decided turns whose resume was lost; how many of each."""
    now = now or timezone.now()
    expired = ToolApproval.objects.filter(expires_at__lt=now, decision__isnull=True).select_related("turn")[:500]
    count = 0
    for approval in expired:
        with transaction.atomic():
            count += approval_decide(
                approval=approval, outcome=Outcome.TIMEOUT, via=ToolApprovalDecision.Via.SWEEPER
            ).won
    decided_before = now - timedelta(seconds=RESUME_AFTER_SECONDS)
    lost = Turn.objects.filter(
        Exists(
            ToolApprovalDecision.objects.filter(approval__turn=OuterRef("pk"), decided_at__lt=decided_before).filter(
                Q(approval__turn__enqueued_at__isnull=True) | Q(approval__turn__enqueued_at__lt=F("decided_at"))
            )
        ),
        status=Turn.Status.AWAITING_APPROVAL,
    ).values_list("pk", flat=True)[:500]
    for turn_id in lost:
        logger.warning("decided approval's turn re-enqueued", extra={"turn_id": turn_id})
        count += turn_enqueue(turn_id=turn_id)
    return count


def approval_pending_for(*, turn: Turn) -> ToolApproval | None:
    """The undecided approval the turn waits on (the REST turn shows it), if any."""
    return ToolApproval.objects.filter(turn=turn, decision__isnull=True).order_by("-step", "-index").first()


def approval_summary(approval: ToolApproval) -> dict[str, Any]:
    """An approval as the API shows it: the call (arguments redacted and cut), who asked, until when, the decision."""
    decision = decision_of(approval)
    return {
        "id": approval.pk,
        "server": approval.server,
        "tool": approval.tool,
        "arguments": arguments_shown(approval.arguments, secrets=hub_secrets()),
        "requested_by": approval.requested_by,
        "expires_at": approval.expires_at,
        "decision": None
        if decision is None
        else {
            "outcome": decision.outcome,
            "via": decision.via,
            "decided_by": decision.decided_by,
            "decided_at": decision.decided_at,
        },
    }
