"""Who a turn acts for (ARCHITECTURE §12.0 U1): its principal, and the admission decision that let it run.

A turn's principal is the person whose will it carries out, never the messenger that delivered the request: the
sender of a person's message, the person who started a hand-off chain (a bot's answer carries its asker's
principal on), a schedule's creator, an automation's owner, a REST client's user, the sender of a message the
catch-up read. Every door (routing, a hand-off, a command, a schedule's run, a press, the catch-up, REST) asks
one question of that person, U2's "may this principal make this bot act here?", and stores the answer on the turn
(`Turn.admission`) so explain and REST can show why it ran.

These are plain values: the rule that decides lives with the doors that know the chat's settings
(feishu.admission for Feishu; agents' REST permissions for the API).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

# How authority reached the turn (Admission.door): the door it came through.
DOOR_MESSAGE = "message"  # a person's message in a group (an @, a reply, a discuss wake)
DOOR_DM = "dm"  # a person's direct message
DOOR_EDIT = "edit"  # an edit that newly addresses the bot (O6)
DOOR_HANDOFF = "handoff"  # another bot's answer (B1): the chain's principal is admitted, not the bot
DOOR_COMMAND = "command"  # /context, /schedule, /help ... (K1)
DOOR_SCHEDULE = "schedule"  # a schedule's run, re-checked for its creator every time (U4)
DOOR_AUTOMATION = "automation"  # an automation made in the console: its owner
DOOR_PRESS = "press"  # a card button (approvals, H1/U5)
DOOR_CATCHUP = "catchup"  # a message the catch-up read after a gap (D2/U7)
DOOR_REST = "rest"  # the REST API: the authenticated user

# The console's words for each door (explain, the turn's page).
DOOR_WORDS = {
    DOOR_MESSAGE: _("their message in the group"),
    DOOR_DM: _("their direct message"),
    DOOR_EDIT: _("their edited message"),
    DOOR_HANDOFF: _("a hand-off in a chain they started"),
    DOOR_COMMAND: _("their command"),
    DOOR_SCHEDULE: _("a schedule they made"),
    DOOR_AUTOMATION: _("an automation they own"),
    DOOR_PRESS: _("their press on a card"),
    DOOR_CATCHUP: _("their message, read after a gap"),
    DOOR_REST: _("their REST request"),
}

DOORS = (
    DOOR_MESSAGE,
    DOOR_DM,
    DOOR_EDIT,
    DOOR_HANDOFF,
    DOOR_COMMAND,
    DOOR_SCHEDULE,
    DOOR_AUTOMATION,
    DOOR_PRESS,
    DOOR_CATCHUP,
    DOOR_REST,
)


@dataclass(frozen=True)
class Principal:
    """A person: a Feishu user (open_id as the app that heard them knows them, and their union_id, the same across
    one developer's apps) or a hub user (REST, the console). Empty: nobody, and nobody is admitted."""

    open_id: str = ""
    union_id: str = ""
    user_id: int | None = None  # a hub user (django.contrib.auth), for REST and console automations

    @property
    def is_known(self) -> bool:
        return bool(self.open_id or self.union_id or self.user_id is not None)

    def is_one_of(self, ids: object) -> bool:
        """Whether a list of Feishu ids (open_ids, or union_ids for people across apps) names this person.

        Open ids are per app, so the same person has another open_id in another bot's app: an open_id from one
        app never equals another person's in any app (no false match), and a list may name someone by union_id
        to cover every app of one developer. An empty id never matches.
        """
        if not isinstance(ids, list | tuple | set | frozenset):
            return False
        named = {str(value) for value in ids if value}
        return bool(self.open_id and self.open_id in named) or bool(self.union_id and self.union_id in named)

    def label(self) -> str:
        if self.open_id:
            return self.open_id
        if self.union_id:
            return self.union_id
        return f"user {self.user_id}" if self.user_id is not None else ""


NOBODY = Principal()


@dataclass(frozen=True)
class Admission:
    """U2's answer for one principal at one door: allowed or not, the rule that decided, and why in a sentence."""

    allowed: bool
    door: str
    rule: str  # the deciding rule's code (RULE_* of the deciding module), stable for tests and the console
    reason: str  # a sentence for explain and logs (English; the console translates the rule code)

    def as_record(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "door": self.door, "rule": self.rule, "reason": self.reason}


def principal_from_turn(turn: Any) -> Principal:
    """The principal stored on a turn (agents.Turn), as a value."""
    return Principal(
        open_id=turn.principal_open_id or "",
        union_id=turn.principal_union_id or "",
        user_id=turn.principal_user_id,
    )


def acts_for_in_words(turn: Any) -> str:
    """The console's one line on who a turn acts for and through which door (U1), e.g. "ou_alice, through a
    hand-off in a chain they started"; turns made before principals were recorded say so."""
    principal = principal_from_turn(turn)
    admission = turn.admission or {}
    if not principal.is_known:
        return gettext("nobody recorded (a turn from before principals were kept)")
    who = principal.label()
    if principal.user_id is not None and getattr(turn, "principal_user", None) is not None:
        who = turn.principal_user.get_username()
    door = DOOR_WORDS.get(str(admission.get("door", "")))
    return gettext("%(who)s, through %(door)s") % {"who": who, "door": door} if door else who
