"""Approval cards in Feishu (ARCHITECTURE H1): the question, the press, the answer on the card.

- `approval_card_post`: the card (what tool, its arguments redacted and cut, who asked, until when; Allow once /
  Allow in this conversation / Deny) as a reply to the message that started the turn, with a uuid fixed per
  approval, so a re-run never posts a second one;
- `card_action_answer`: a `card.action.trigger` callback, verified by lark-oapi (webhook: signature, token and
  our replay window; long connection: the authenticated socket). A press on a card that is not this bot's
  approval card (another app, another message, an unknown approval) is refused. Who may decide is read from the
  approval, never from the press (U5): the person the turn acts for, the owner of the chat the card was posted in,
  or the bot's owner; others get a toast saying who can. Allowing also asks U2's admission for that person at the
  press door (they may have lost the right to use the bot here since). A press after the deadline is refused as
  expired and records the deadline's denial. The first decision wins and every later press (a replay of the same
  event included) gets the card as decided and changes nothing;
- `approval_card_patch`: a decision made elsewhere (REST, the sweeper's timeout) shown on the card.
"""

import logging
from typing import Any

from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.models import Bot, ToolApproval, ToolApprovalDecision, Turn
from agents.principals import DOOR_PRESS, Principal, principal_from_turn
from agents.secrets import hub_secrets
from agents.services.turns.approvals import approval_decide, arguments_shown, decision_of
from agents.services.turns.channels import ApprovalPlace
from feishu.admission import admission_decide, bot_owner_is, workspace_owner_is
from feishu.channel.sources import source_parsed
from feishu.outbound import sends as feishu_sends  # the module: lazy (lark-oapi loads on first use)
from feishu.outbound.budget import SendBudget
from threadcontext.models import Workspace
from threadcontext.selectors import workspace_cached_get

logger = logging.getLogger(__name__)

VALUE_KEY = "amux_approval"  # the button's callback value names the approval; any other value is not ours
Outcome = ToolApprovalDecision.Outcome
BUTTONS = (
    (Outcome.ALLOW_ONCE, gettext_lazy("Allow once"), "primary"),
    (Outcome.ALLOW_CONVERSATION, gettext_lazy("Allow in this conversation"), "default"),
    (Outcome.DENY, gettext_lazy("Deny"), "danger"),
)
OUTCOME_TEXT: dict[str, Any] = {
    Outcome.ALLOW_ONCE: gettext_lazy("Allowed once"),
    Outcome.ALLOW_CONVERSATION: gettext_lazy("Allowed in this conversation"),
    Outcome.DENY: gettext_lazy("Denied"),
    Outcome.TIMEOUT: gettext_lazy("Denied: no decision in time"),
}


def person(identity: str) -> str:
    """A Feishu user as a card shows them (a mention), anyone else by name."""
    return f"<at id={identity}></at>" if identity.startswith("ou_") else identity


def approval_card(*, bot: Bot, approval: ToolApproval, decision: ToolApprovalDecision | None = None) -> dict:
    """The card in the bot's language: the question with its three buttons, or, once decided, the decision."""
    with translation.override(bot.language):
        lines = [
            _("**Approval needed** to run **%(tool)s** (%(server)s):")
            % {"tool": approval.tool, "server": approval.server},
            "```json\n" + arguments_shown(approval.arguments, secrets=hub_secrets()) + "\n```",
            _("Asked by %(person)s") % {"person": person(approval.requested_by) or "?"},
        ]
        if decision is None:
            lines.append(
                _("No decision by %(time)s UTC counts as a denial.") % {"time": f"{approval.expires_at:%H:%M:%S}"}
            )
        else:
            who = person(decision.decided_by) if decision.decided_by else ""
            outcome = str(OUTCOME_TEXT[decision.outcome])
            lines.append(f"**{outcome}**" + (" · " + who if who else ""))
        elements: list[dict[str, Any]] = [{"tag": "markdown", "content": "\n\n".join(lines)}]
        if decision is None:
            elements += [
                {
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": str(label)},
                    "type": style,
                    "behaviors": [{"type": "callback", "value": {VALUE_KEY: approval.pk, "decision": str(outcome)}}],
                }
                for outcome, label, style in BUTTONS
            ]
    return {"schema": "2.0", "config": {"update_multi": True}, "body": {"elements": elements}}


def approval_card_post(*, turn: Turn, approval: ToolApproval) -> None:
    """Post the card as a reply to the turn's message (same uuid on every try) and note its message id."""
    parsed = source_parsed(turn=turn)
    if parsed is None or not turn.bot.has_feishu_credentials:
        return
    sent = feishu_sends.message_reply_content(
        bot=turn.bot,
        message_id=parsed.message_id,
        msg_type="interactive",
        content=approval_card(bot=turn.bot, approval=approval),
        uuid=f"amux-approval-{approval.pk}",
        reply_in_thread=parsed.is_in_topic,
        budget=SendBudget(chat_id=parsed.chat_id),
    )
    ToolApproval.objects.filter(pk=approval.pk).update(card_message_id=sent.message_id[:64])
    approval.card_message_id = sent.message_id


def approval_card_patch(*, turn: Turn, approval: ToolApproval, decision: ToolApprovalDecision) -> None:
    approval.refresh_from_db(fields=["card_message_id"])
    if approval.card_message_id and turn.bot.has_feishu_credentials:
        card = approval_card(bot=turn.bot, approval=approval, decision=decision)
        feishu_sends.message_card_patch(bot=turn.bot, message_id=approval.card_message_id, card=card)


def approval_place_of(*, turn: Turn) -> ApprovalPlace:
    """Where the turn's request was made (U5): its chat (the card goes there, as a reply to it) and, in a group, its
    topic or the main timeline (in a DM the whole session is one conversation). Nowhere known: the empty place."""
    parsed = source_parsed(turn=turn)
    if parsed is None:
        return ApprovalPlace()
    return ApprovalPlace(chat_id=parsed.chat_id, topic="" if parsed.is_direct else parsed.root_msg_id)


def approval_decider_is(*, bot: Bot, workspace: Workspace | None, principal: Principal, operator: Principal) -> bool:
    """Pure (U5): may `operator` decide a call asked for `principal` in the chat of `workspace` (None: a DM)? The
    person the turn acts for, the chat's owner (the workspace's owner_open_id, whom owner_only trusts) or the bot's
    owner (`Bot.feishu_owner_open_id`, who may decide over REST as well). Nobody else, and never an empty id."""
    if not operator.is_known:
        return False
    is_principal = principal.is_known and operator.is_one_of([principal.open_id, principal.union_id])
    return (
        is_principal
        or workspace_owner_is(workspace=workspace, principal=operator)
        or bot_owner_is(bot=bot, principal=operator)
    )


def _toast(kind: str, text: str) -> dict[str, Any]:
    return {"toast": {"type": kind, "content": text}}


def _field(value: Any, *path: str) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def card_action_answer(*, bot: Bot, event: dict[str, Any]) -> dict[str, Any]:
    """The callback's answer (a toast, and the card as it stands when the press was about an approval of ours)."""
    with translation.override(bot.language):
        value = _field(event, "event", "action", "value")
        approval_id = value.get(VALUE_KEY) if isinstance(value, dict) else None
        if not isinstance(approval_id, int) or isinstance(approval_id, bool):
            return _toast("error", _("This button does not belong to this bot."))
        approval = (
            ToolApproval.objects.select_related("turn__bot", "decision").filter(pk=approval_id, turn__bot=bot).first()
        )
        message_id = _field(event, "event", "context", "open_message_id") or ""
        # The press must be on the approval's own card: an approval without a card (REST, no source) has none.
        if approval is None or not approval.card_message_id or message_id != approval.card_message_id:
            logger.warning("foreign approval press refused", extra={"bot": bot.slug, "approval_id": approval_id})
            return _toast("error", _("This button does not belong to this bot."))
        outcome = value.get("decision")
        if outcome not in {str(choice) for choice, _label, _style in BUTTONS}:
            return _toast("error", _("This button does not belong to this bot."))
        decision = decision_of(approval)
        if decision is not None:
            return _decided_answer(bot=bot, approval=approval, decision=decision)
        refusal = _press_refusal(bot=bot, approval=approval, event=event, outcome=outcome)
        if refusal is not None:
            return _toast("warning", refusal)
        decided = approval_decide(
            approval=approval,
            outcome=outcome,
            via=ToolApprovalDecision.Via.CARD,
            decided_by=_field(event, "event", "operator", "open_id") or "",
            event_id=_field(event, "header", "event_id") or "",
        )
        if decided.expired:
            text = _("This approval expired at %(time)s UTC: no decision in time counts as a denial.") % {
                "time": f"{approval.expires_at:%H:%M:%S}"
            }
            card = approval_card(bot=bot, approval=approval, decision=decided.decision)
            return {**_toast("warning", text), "card": {"type": "raw", "data": card}}
        if not decided.won:
            return _decided_answer(bot=bot, approval=approval, decision=decided.decision)
        card = approval_card(bot=bot, approval=approval, decision=decided.decision)
    return {**_toast("success", str(OUTCOME_TEXT[decided.decision.outcome])), "card": {"type": "raw", "data": card}}


def _decided_answer(*, bot: Bot, approval: ToolApproval, decision: ToolApprovalDecision) -> dict[str, Any]:
    """A press on a decided approval (a later press, a replay): the card as decided, nothing changed."""
    text = _("Already decided: %(outcome)s") % {"outcome": str(OUTCOME_TEXT[decision.outcome])}
    card = approval_card(bot=bot, approval=approval, decision=decision)
    return {**_toast("info", text), "card": {"type": "raw", "data": card}}


def _press_refusal(*, bot: Bot, approval: ToolApproval, event: dict[str, Any], outcome: str) -> str | None:
    """Why this press may not decide (U5), in the bot's language, or None. Everything is read from the approval (its
    turn's principal, the chat its card is in), nothing from the press but who pressed."""
    operator = Principal(
        open_id=str(_field(event, "event", "operator", "open_id") or ""),
        union_id=str(_field(event, "event", "operator", "union_id") or ""),
    )
    principal = principal_from_turn(approval.turn)
    workspace = workspace_cached_get(bot_profile=bot.slug, chat_id=approval.chat_id) if approval.chat_id else None
    if not approval_decider_is(bot=bot, workspace=workspace, principal=principal, operator=operator):
        return _("Only the person who asked, or the bot's owner in this chat, can decide.")
    if outcome == Outcome.DENY:
        return None  # a denial makes the bot do nothing: whoever may decide may deny
    # Allowing resumes the turn for its principal: the press door asks U2 for them, as every door does.
    admission = admission_decide(bot=bot, workspace=workspace, principal=principal, door=DOOR_PRESS)
    if not admission.allowed:
        logger.info("approval press refused", extra={"approval_id": approval.pk, "rule": admission.rule})
        return _("The person who asked may no longer use this bot here, so the call cannot be allowed.")
    return None
