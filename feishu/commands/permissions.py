"""Who may run /context and /schedule in a chat (K1): a pure rule over the workspace's settings."""

from __future__ import annotations

from dataclasses import dataclass

from agents.principals import Principal
from threadcontext.models import Workspace

WHO_ANYONE = "anyone"
WHO_OWNER = "owner"
WHO_LISTED = "listed"


@dataclass(frozen=True)
class CommandPermission:
    allowed: bool
    who: str  # WHO_*: the rule that applies here (the refusal says it)
    open_ids: tuple[str, ...] = ()  # the people the rule names (owner, or the list), for the refusal's mentions


def command_permission(*, workspace: Workspace | None, principal: Principal) -> CommandPermission:
    """The workspace's explicit `command_open_ids` when set (its owner is always allowed too); else the mode:
    owner_only -> the owner; shared -> anyone the group lets trigger the bot (`allowed_open_ids`, empty: all).
    A DM (no workspace) is the person's own conversation with the bot: the bot's DM policy decides (U2,
    feishu.admission), not this."""
    if workspace is None:
        return CommandPermission(allowed=True, who=WHO_ANYONE)
    owner = workspace.owner_open_id
    listed = tuple(workspace.command_open_ids or ())
    if listed:
        people = tuple(dict.fromkeys((*listed, owner) if owner else listed))
        return CommandPermission(allowed=principal.is_one_of(people), who=WHO_LISTED, open_ids=people)
    if workspace.mode == Workspace.Mode.OWNER_ONLY:
        return CommandPermission(
            allowed=bool(owner) and principal.is_one_of([owner]), who=WHO_OWNER, open_ids=(owner,) if owner else ()
        )
    allowed = tuple(workspace.allowed_open_ids or ())
    if allowed:
        return CommandPermission(allowed=principal.is_one_of(allowed), who=WHO_LISTED, open_ids=allowed)
    return CommandPermission(allowed=True, who=WHO_ANYONE)
