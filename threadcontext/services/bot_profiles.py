"""A bot profile's records follow its bot (issue 30, finding 5).

This app names a bot by its slug (it never imports agents), so a record would otherwise belong to whichever bot
holds that slug today: after a bot was deleted, a new bot given the same slug, perhaps by another owner, would read
its decisions, inherit its workspaces' reply policy and owner, and resume its sessions. The bridge, which knows
both apps, calls these when a bot is deleted or renamed (feishu/apps.py), so the slug is never reused stale.
Thread events stay: they are the chat's own history, read by the other bots of the chat.
"""

from dataclasses import dataclass

from django.db import transaction

from threadcontext.models import SessionBinding, ThreadContextDecision, Workspace
from threadcontext.selectors import workspace_cache_forget


@dataclass(frozen=True)
class ProfileForgetResult:
    decisions: int
    workspaces: int
    session_bindings: int


@transaction.atomic
def bot_profile_forget(*, bot_profile: str) -> ProfileForgetResult:
    """Delete the decisions, workspaces and session bindings of a deleted bot's profile."""
    chat_ids = list(Workspace.objects.filter(bot_profile=bot_profile).values_list("chat_id", flat=True))
    decisions, _ = ThreadContextDecision.objects.filter(bot_profile=bot_profile).delete()
    workspaces, _ = Workspace.objects.filter(bot_profile=bot_profile).delete()
    bindings, _ = SessionBinding.objects.filter(bot_profile=bot_profile).delete()
    transaction.on_commit(lambda: _caches_forget(bot_profile=bot_profile, chat_ids=chat_ids))
    return ProfileForgetResult(decisions=decisions, workspaces=workspaces, session_bindings=bindings)


@transaction.atomic
def bot_profile_rename(*, old: str, new: str) -> None:
    """Move a renamed bot's decisions, workspaces and sessions to its new slug: they stay its own."""
    if old == new:
        return
    # The new slug was free, so whatever still carries it is a leftover of no bot (from before this rule).
    bot_profile_forget(bot_profile=new)
    chat_ids = list(Workspace.objects.filter(bot_profile=old).values_list("chat_id", flat=True))
    ThreadContextDecision.objects.filter(bot_profile=old).update(bot_profile=new)
    Workspace.objects.filter(bot_profile=old).update(bot_profile=new)
    SessionBinding.objects.filter(bot_profile=old).update(bot_profile=new)

    def forget_both() -> None:
        for slug in (old, new):
            _caches_forget(bot_profile=slug, chat_ids=chat_ids)

    transaction.on_commit(forget_both)


def _caches_forget(*, bot_profile: str, chat_ids: list[str]) -> None:
    for chat_id in chat_ids:
        workspace_cache_forget(bot_profile=bot_profile, chat_id=chat_id)
