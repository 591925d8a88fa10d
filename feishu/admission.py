"""U2: one admission check for every Feishu door: may this principal make this bot act here?

Every door asks it of the turn's principal (agents.principals), never of the messenger: routing for a person's
message, edit and catch-up read; the hand-off receiver for the person who started the chain (a bot's answer carries
no authority of its own); the command dispatcher; a schedule's run, for its creator, every time; a card press.
The rules, in the order they decide:

1. nobody behind it (no principal): refused; authority is carried, never inferred;
2. a schedule's or an automation's run into a chat the bot has left (its workspace retired, U4): refused; a
   message's arrival shows the bot is there, a run's does not;
3. an automation made in the console (DOOR_AUTOMATION): its owner's, admitted (the owner configured the chat);
4. a direct message (no workspace): the bot's DM policy (`Bot.dm_policy`: everyone, listed, owner);
5. a command in a group: the chat's command permission (K1: `command_open_ids`, else the mode and the list);
6. a group: the chat's reply mode off (G5), its list of people (`allowed_open_ids`, G5), owner_only (C2, G3).

Pure: reads the bot and the workspace the caller already holds (both cached on the hot path), so asking adds no
statement to an @-mention.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

from agents.models import Bot
from agents.principals import DOOR_AUTOMATION, DOOR_COMMAND, DOOR_SCHEDULE, Admission, Principal
from feishu.commands.permissions import command_permission
from feishu.inbound.parsing import ParsedMessage
from threadcontext.models import Workspace

RULE_ADMITTED = "admitted"
RULE_NOBODY = "no_principal"
RULE_DM_POLICY = "dm_policy"
RULE_COMMAND = "command_permission"
RULE_REPLY_OFF = "reply_off"
RULE_NOT_ALLOWED = "not_allowed"
RULE_NOT_OWNER = "not_owner"
RULE_BOT_LEFT = "bot_left"

REPLY_OFF = "off"
AT_ALL_KEY = "@_all"  # Feishu's mention of everyone in a group

# What the console says of an inbound event a door refused (its stored outcome, feishu.inbound.routing).
REFUSED_OUTCOME_WORDS = {
    "not_allowed": _("refused: the chat's list of people who may use the bot leaves the sender out"),
    "not_owner": _("refused: the bot is owner only in this chat"),
    "reply_off": _("recorded only: the chat turned the bot's replies off"),
    "dm_policy": _("refused: the bot's direct-message policy leaves the sender out"),
    "handoff_refused": _("refused: the person who started the hand-off chain may not use this bot here"),
}


def bot_owner_is(*, bot: Bot, principal: Principal) -> bool:
    """Whether the principal is the bot's owner as Feishu knows them (`Bot.feishu_owner_open_id`)."""
    return bool(bot.feishu_owner_open_id) and principal.is_one_of([bot.feishu_owner_open_id])


def workspace_owner_is(*, workspace: Workspace | None, principal: Principal) -> bool:
    return workspace is not None and bool(workspace.owner_open_id) and principal.is_one_of([workspace.owner_open_id])


def _dm_admission(*, bot: Bot, principal: Principal, door: str) -> Admission:
    policy = bot.dm_policy
    if policy == Bot.DmPolicy.EVERYONE or bot_owner_is(bot=bot, principal=principal):
        return Admission(True, door, RULE_ADMITTED, f"direct messages: {policy}")
    if policy == Bot.DmPolicy.LISTED and principal.is_one_of(list(bot.dm_open_ids or [])):
        return Admission(True, door, RULE_ADMITTED, "direct messages: listed")
    who = "the people listed and the owner" if policy == Bot.DmPolicy.LISTED else "its owner"
    return Admission(False, door, RULE_DM_POLICY, f"the bot takes direct messages from {who} only")


def admission_decide(*, bot: Bot, workspace: Workspace | None, principal: Principal, door: str) -> Admission:
    """Pure (U2): may `principal` make `bot` act here (the chat `workspace`; None for a DM) through `door`?"""
    if not principal.is_known:
        return Admission(False, door, RULE_NOBODY, "nobody to act for: the request carries no person")
    if door in (DOOR_SCHEDULE, DOOR_AUTOMATION) and workspace is not None and workspace.retired_at is not None:
        return Admission(False, door, RULE_BOT_LEFT, "the bot is no longer in this chat")
    if door == DOOR_AUTOMATION:
        return Admission(True, door, RULE_ADMITTED, "the bot's owner made this automation in the console")
    if workspace is None:
        return _dm_admission(bot=bot, principal=principal, door=door)
    if door == DOOR_COMMAND:
        permission = command_permission(workspace=workspace, principal=principal)
        if permission.allowed:
            return Admission(True, door, RULE_ADMITTED, f"commands: {permission.who}")
        return Admission(False, door, RULE_COMMAND, f"commands here are for {permission.who} only")
    reply_mode = workspace.reply_mode or bot.group_reply_mode
    if reply_mode == REPLY_OFF:
        return Admission(False, door, RULE_REPLY_OFF, "the chat turned the bot's replies off")
    allowed = list(workspace.allowed_open_ids or [])
    if allowed and not principal.is_one_of(allowed):
        return Admission(False, door, RULE_NOT_ALLOWED, "the chat's list of people who may use the bot leaves them out")
    if workspace.mode == Workspace.Mode.OWNER_ONLY and not workspace_owner_is(workspace=workspace, principal=principal):
        return Admission(False, door, RULE_NOT_OWNER, "the bot is owner only in this chat")
    return Admission(True, door, RULE_ADMITTED, "admitted")


@dataclass(frozen=True)
class GroupPolicy:
    """G5: what this group's workspace makes of this message, on top of the bot's own settings. Who may make the
    bot act is U2's question (feishu.admission), asked of the message's principal."""

    reply_mode: str  # mention | discuss | off
    is_at_all: bool
    at_all_addresses: bool


def group_policy(*, bot: Bot, workspace: Workspace | None, parsed: ParsedMessage) -> GroupPolicy:
    """Pure: the workspace's override of the reply mode and its @all rule.

    U8: an @all is Feishu's mention of everyone (a mention keyed `@_all`); the same characters typed as text are
    text, never an @all.
    """
    reply_mode = (workspace.reply_mode if workspace is not None else "") or bot.group_reply_mode
    is_at_all = any(mention.key == AT_ALL_KEY for mention in parsed.mentions)
    return GroupPolicy(
        reply_mode=reply_mode,
        is_at_all=is_at_all,
        at_all_addresses=is_at_all and workspace is not None and workspace.respond_to_at_all,
    )
