"""`/schedule <when> <prompt>`, `/schedule list`, `/schedule cancel <n>` (K4): automations made from the chat.

Each is an `agents.Automation` (its beat schedule synced by agents.services.automations) on a crontab in the
workspace's time zone (`Workspace.time_zone`, else the hub's TIME_ZONE), posting each run's answer into this
chat, and into this topic when the command was sent in one (FeishuAutomationChannel). `<n>` is the position in
`/schedule list`: this bot's schedules made from this chat, oldest first.
"""

from __future__ import annotations

import secrets
from zoneinfo import ZoneInfo

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django_celery_beat.models import CrontabSchedule

from agents.models import Automation, Bot
from agents.services.automations import automation_create, automation_delete
from feishu.commands.context import CommandReply
from feishu.commands.grammar import SCHEDULE_CANCEL, SCHEDULE_LIST, ChatCommand
from feishu.commands.texts import mentions_text
from feishu.commands.when import WhenError, schedule_parse
from feishu.inbound.parsing import ParsedMessage
from threadcontext.models import MAIN_TIMELINE_KEY, Workspace
from threadcontext.trimming import text_preview

# A chat's schedules per bot: enough for a team's routines, few enough that a typo loop cannot flood the chat.
MAX_SCHEDULES_PER_CHAT = 20

SCHEDULE_USAGE = _(
    "Usage: /schedule <when> <prompt>. <when> is one of: daily 09:00 | weekdays 18:30 | weekends 10:00 | "
    "mon 10:00 (or mon,wed,fri 10:00) | every 2h | every 30m | a cron string such as 0 9 * * 1-5. "
    "Times are in %(tz)s. Also: /schedule list, /schedule cancel <n>."
)
SCHEDULE_CREATED = _("Scheduled as number %(n)s (%(cron)s, %(tz)s); the first run is at %(next)s. I will post here.")
SCHEDULE_TOO_MANY = _("This chat already has %(count)s schedules of mine; cancel one first.")
SCHEDULE_NONE = _("No schedules of mine were made in this chat.")
SCHEDULE_LIST_TITLE = _("My schedules in this chat (%(count)s):")
SCHEDULE_NO_SUCH = _("There is no schedule number %(n)s here; send /schedule list.")
SCHEDULE_CANCELLED = _("Cancelled schedule number %(n)s.")


def workspace_time_zone(workspace: Workspace | None) -> str:
    return (workspace.time_zone if workspace is not None else "") or settings.TIME_ZONE


def _chat_schedules(*, bot: Bot, chat_id: str) -> list[Automation]:
    return list(
        Automation.objects.filter(bot=bot, feishu_chat_id=chat_id)
        .exclude(created_by_open_id="")
        .select_related("schedule")
        .order_by("id")[:MAX_SCHEDULES_PER_CHAT]
    )


def _cron_of(schedule: CrontabSchedule) -> str:
    return f"{schedule.minute} {schedule.hour} {schedule.day_of_month} {schedule.month_of_year} {schedule.day_of_week}"


def _next_run(schedule: CrontabSchedule, tz: str) -> str:
    now = timezone.now().astimezone(ZoneInfo(tz))
    upcoming = now + schedule.schedule.remaining_estimate(now)
    return f"{upcoming:%Y-%m-%d %H:%M}"


def _topic_message_id(parsed: ParsedMessage) -> str:
    """The topic the runs post into: the command's topic (its root), or none in a main timeline or a DM."""
    if parsed.is_direct or parsed.root_msg_id == MAIN_TIMELINE_KEY:
        return ""
    return parsed.root_msg_id


def _create(*, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None, text: str) -> CommandReply:
    tz = workspace_time_zone(workspace)
    try:
        when, prompt = schedule_parse(text)
    except WhenError:
        return CommandReply(str(SCHEDULE_USAGE) % {"tz": tz})
    existing = _chat_schedules(bot=bot, chat_id=parsed.chat_id)
    if len(existing) >= MAX_SCHEDULES_PER_CHAT:
        return CommandReply(str(SCHEDULE_TOO_MANY) % {"count": len(existing)})
    schedule, _ = CrontabSchedule.objects.get_or_create(
        minute=when.minute,
        hour=when.hour,
        day_of_month=when.day_of_month,
        month_of_year=when.month_of_year,
        day_of_week=when.day_of_week,
        timezone=ZoneInfo(tz),
    )
    automation_create(
        bot=bot,
        name=f"/schedule {secrets.token_hex(4)}: {text_preview(prompt, 60)}"[:100],
        prompt=prompt,
        schedule=schedule,
        feishu_chat_id=parsed.chat_id,
        feishu_topic_message_id=_topic_message_id(parsed),
        created_by_open_id=parsed.sender_open_id,
    )
    numbers = {"n": len(existing) + 1, "cron": when.cron, "tz": tz, "next": _next_run(schedule, tz)}
    return CommandReply(str(SCHEDULE_CREATED) % numbers)


def schedule_command_run(
    *, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None, command: ChatCommand
) -> CommandReply:
    if command.action == SCHEDULE_LIST:
        schedules = _chat_schedules(bot=bot, chat_id=parsed.chat_id)
        if not schedules:
            return CommandReply(str(SCHEDULE_NONE))
        lines = [str(SCHEDULE_LIST_TITLE) % {"count": len(schedules)}]
        for number, automation in enumerate(schedules, start=1):
            tz = str(automation.schedule.timezone)
            who = mentions_text((automation.created_by_open_id,))
            lines.append(f"{number}. {_cron_of(automation.schedule)} ({tz}) · {who}: {text_preview(automation.prompt)}")
        return CommandReply("\n".join(lines))
    if command.action == SCHEDULE_CANCEL:
        schedules = _chat_schedules(bot=bot, chat_id=parsed.chat_id)
        number = int(command.rest) if command.rest.isdigit() else 0
        if not 1 <= number <= len(schedules):
            return CommandReply(str(SCHEDULE_NO_SUCH) % {"n": command.rest})
        automation_delete(automation=schedules[number - 1])
        return CommandReply(str(SCHEDULE_CANCELLED) % {"n": number})
    return _create(bot=bot, parsed=parsed, workspace=workspace, text=command.rest)
