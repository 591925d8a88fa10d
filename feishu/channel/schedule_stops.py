"""U4 (issue 35): a schedule runs as its creator, admitted for them at every run; it stops when they may no longer
make the bot act in its chat, or when the bot has left that chat, and they are told once.

The check is the one admission function (feishu.admission) at DOOR_SCHEDULE, for the creator, in the chat the
schedule posts to: a group's workspace (its reply mode, its list of people, owner_only; a retired workspace: the bot
left), or for a DM schedule the bot's DM policy. An automation made in the console (DOOR_AUTOMATION) is its
owner's: it stops only when the bot has left its chat.

Stopping (agents.services.automations.automation_stop) disables the automation and its periodic task; only the call
that stopped it tells, so a run and a removal event racing tell once. The line goes to the creator directly (a
message to their open_id), in the bot's language, with a uuid fixed per automation (Feishu dedupes a retried send):
when the bot has left the chat it cannot post there, and when a chat took the creator off its list a line in the
group would tell everyone so; a direct message reaches the creator either way and names the schedule. A console
automation's line goes to the bot's owner as Feishu knows them (`Bot.feishu_owner_open_id`), when known.

A stopped schedule stays stopped: re-adding the bot or listing the person again does not restart it (the creator
makes it again), and `/schedule list` shows it as stopped until it is cancelled.
"""

from __future__ import annotations

import logging

from django.utils import translation
from django.utils.translation import gettext_lazy as _

from agents.models import Automation, Bot
from agents.principals import Admission, Principal
from agents.services.automations import automation_stop
from feishu.admission import RULE_BOT_LEFT, admission_decide
from feishu.commands.when import cron_text
from feishu.outbound.delivery import feishu_notice_send
from threadcontext.models import Workspace
from threadcontext.selectors import workspace_get
from threadcontext.services import workspace_ensure
from threadcontext.trimming import text_preview

logger = logging.getLogger(__name__)

CHAT_TYPE_P2P = "p2p"
CHAT_TYPE_GROUP = "group"
STOPPED_PURPOSE = "automation_stopped"

STOPPED_BOT_LEFT = _('I stopped your schedule "%(prompt)s" (%(cron)s): I am no longer in the chat it posts to.')
STOPPED_NOT_ADMITTED = _(
    'I stopped your schedule "%(prompt)s" (%(cron)s): you may no longer use me in the chat it posts to.'
)
STOPPED_DM_POLICY = _('I stopped your schedule "%(prompt)s" (%(cron)s): you may no longer message me directly.')


def _chat_workspace(*, automation: Automation) -> Workspace | None:
    """The workspace of the chat the automation posts to; None for a DM (the DM policy decides)."""
    bot = automation.bot
    if automation.feishu_chat_type == CHAT_TYPE_P2P:
        return None
    if automation.created_by_open_id:
        # A /schedule made in a group: the group has a workspace (G2); one an operator deleted since is made again
        # with the hub's defaults, as the group's next message would, never read as a DM's absence of one.
        workspace, _created = workspace_ensure(bot_profile=bot.slug, chat_id=automation.feishu_chat_id)
        return workspace
    return workspace_get(bot_profile=bot.slug, chat_id=automation.feishu_chat_id)  # a console automation's chat


def automation_run_admission(*, automation: Automation, principal: Principal, admission: Admission) -> Admission:
    """U4: the decision for one run of an automation that posts into a Feishu chat, read fresh (not from a process's
    cache: a run is rare, and a chat that just took its creator off its list must be obeyed now)."""
    if not automation.feishu_chat_id:
        return admission  # posts nowhere in Feishu: nothing of a chat to check
    workspace = _chat_workspace(automation=automation)
    return admission_decide(bot=automation.bot, workspace=workspace, principal=principal, door=admission.door)


def _stopped_text(*, automation: Automation, rule: str) -> str:
    if rule == RULE_BOT_LEFT:
        text = STOPPED_BOT_LEFT
    elif automation.feishu_chat_type == CHAT_TYPE_P2P:
        text = STOPPED_DM_POLICY
    else:
        text = STOPPED_NOT_ADMITTED
    with translation.override(automation.bot.language):
        return str(text) % {"prompt": text_preview(automation.prompt, 60), "cron": cron_text(automation.schedule)}


def automation_stopped_tell(*, automation: Automation, rule: str) -> None:
    """The one line to the person a stopped automation acted for, sent to them directly (see the module docstring).
    Sent after the caller's transaction commits; its uuid is fixed per automation, so it is posted once."""
    open_id = automation.created_by_open_id or automation.bot.feishu_owner_open_id
    if not open_id:
        logger.info("automation stopped; nobody in Feishu to tell", extra={"automation_id": automation.pk})
        return
    feishu_notice_send(
        bot=automation.bot,
        chat_id=open_id,
        reply_to_message_id="",
        reply_in_thread=False,
        text=_stopped_text(automation=automation, rule=rule),
        purpose=STOPPED_PURPOSE,
        source_key=f"automation:{automation.pk}",
    )


def chat_automations_stop(*, bot: Bot, chat_id: str) -> int:
    """The bot was removed from a group (im.chat.member.bot.deleted_v1): each of its running automations posting
    there stops now, not at its next run, and its creator is told once. How many stopped."""
    running = Automation.objects.filter(bot=bot, feishu_chat_id=chat_id, is_enabled=True).select_related("schedule")
    stopped = 0
    for automation in running:
        automation.bot = bot
        if automation_stop(automation=automation):
            automation_stopped_tell(automation=automation, rule=RULE_BOT_LEFT)
            stopped += 1
    if stopped:
        logger.info("automations stopped: the bot left the chat", extra={"bot": bot.slug, "stopped": stopped})
    return stopped
