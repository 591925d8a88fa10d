"""`/schedule <when> <prompt>`, `/schedule list`, `/schedule cancel <n>` (K4): automations made from the chat.

Each is an `agents.Automation` (its beat schedule synced by agents.services.automations) on a crontab in the
workspace's time zone (`Workspace.time_zone`, else the hub's TIME_ZONE), posting each run's answer into this
chat, and into this topic when the command was sent in one (FeishuAutomationChannel). `<n>` is the position in
`/schedule list`: this bot's schedules made from this chat, oldest first (a stopped one is listed as stopped).

U4 (issue 35): a schedule acts for its creator, so making one is admitted for them at the schedule's own door
(feishu.admission, DOOR_SCHEDULE: a run the chat would refuse is not made; the command permission of K1 applies
before this, and a DM's policy in routing). It is capped per chat (AMUX_SCHEDULES_PER_CHAT) and per person across
the bot's chats and DMs (AMUX_SCHEDULES_PER_PERSON), counting running schedules, and runs at most every
AMUX_SCHEDULE_MIN_INTERVAL_MINUTES. The caps are counted under a lock of the bot's row, so two commands at once
cannot both take the last place. A cron string Celery refuses is answered with one sentence (never an exception
the event would be retried for).
"""

from __future__ import annotations

import secrets
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django_celery_beat.models import CrontabSchedule

from agents.models import Automation, Bot
from agents.principals import DOOR_SCHEDULE
from agents.services.automations import automation_create, automation_delete
from feishu.admission import RULE_DM_POLICY, RULE_NOT_ALLOWED, RULE_NOT_OWNER, RULE_REPLY_OFF, admission_decide
from feishu.channel.schedule_stops import CHAT_TYPE_GROUP, CHAT_TYPE_P2P
from feishu.commands.context import CommandReply
from feishu.commands.grammar import SCHEDULE_CANCEL, SCHEDULE_LIST, ChatCommand
from feishu.commands.texts import mentions_text
from feishu.commands.when import CronError, When, WhenError, cron_text, schedule_parse, when_shortest_gap_minutes
from feishu.inbound.parsing import ParsedMessage
from threadcontext.models import MAIN_TIMELINE_KEY, Workspace
from threadcontext.trimming import text_preview

SCHEDULE_USAGE = _(
    "Usage: /schedule <when> <prompt>. <when> is one of: daily 09:00 | weekdays 18:30 | weekends 10:00 | "
    "mon 10:00 (or mon,wed,fri 10:00) | every 2h | every 30m | a cron string such as 0 9 * * 1-5. "
    "Times are in %(tz)s. Also: /schedule list, /schedule cancel <n>."
)
SCHEDULE_CREATED = _("Scheduled as number %(n)s (%(cron)s, %(tz)s); the first run is at %(next)s. I will post here.")
SCHEDULE_TOO_MANY = _("This chat already has %(count)s schedules of mine (at most %(max)s per chat); cancel one first.")
SCHEDULE_TOO_MANY_PERSON = _(
    "You already have %(count)s schedules of mine (at most %(max)s per person); cancel one first."
)
SCHEDULE_TOO_OFTEN = _(
    "I run a schedule at most once every %(minimum)s minutes; this one would run only %(gap)s minute(s) apart."
)
SCHEDULE_BAD_CRON = _(
    '"%(cron)s" is not a cron string I can run. A cron string is five fields (minute hour day-of-month month '
    "day-of-week), such as 0 9 * * 1-5."
)
SCHEDULE_NOT_ADMITTED = _("I cannot schedule that for you here: %(why)s.")
NOT_ADMITTED_WHY = {
    RULE_REPLY_OFF: _("this chat turned my replies off"),
    RULE_NOT_ALLOWED: _("this chat's list of people who may use me leaves you out"),
    RULE_NOT_OWNER: _("only the workspace owner may use me here"),
    RULE_DM_POLICY: _("you may not message me directly"),
}
NOT_ADMITTED_OTHERWISE = _("you may not use me here")
SCHEDULE_STOPPED_MARK = _("(stopped)")
SCHEDULE_NONE = _("No schedules of mine were made in this chat.")
SCHEDULE_LIST_TITLE = _("My schedules in this chat (%(count)s):")
SCHEDULE_NO_SUCH = _("There is no schedule number %(n)s here; send /schedule list.")
SCHEDULE_CANCELLED = _("Cancelled schedule number %(n)s.")


def workspace_time_zone(workspace: Workspace | None) -> str:
    return (workspace.time_zone if workspace is not None else "") or settings.TIME_ZONE


def _chat_schedules(*, bot: Bot, chat_id: str) -> list[Automation]:
    """This chat's schedules of the bot, oldest first, running or stopped (a stopped one can still be cancelled)."""
    return list(
        Automation.objects.filter(bot=bot, feishu_chat_id=chat_id)
        .exclude(created_by_open_id="")
        .select_related("schedule")
        .order_by("id")
    )


def _refusal(*, bot: Bot, parsed: ParsedMessage, workspace: Workspace | None, when: When) -> str:
    """Why this person may not have this schedule here (a sentence), or "" when they may (U4)."""
    admission = admission_decide(bot=bot, workspace=workspace, principal=parsed.principal, door=DOOR_SCHEDULE)
    if not admission.allowed:
        return str(SCHEDULE_NOT_ADMITTED) % {"why": NOT_ADMITTED_WHY.get(admission.rule, NOT_ADMITTED_OTHERWISE)}
    minimum = settings.AMUX_SCHEDULE_MIN_INTERVAL_MINUTES
    gap = when_shortest_gap_minutes(when)
    if gap < minimum:
        return str(SCHEDULE_TOO_OFTEN) % {"minimum": minimum, "gap": gap}
    Bot.objects.select_for_update().filter(pk=bot.pk).first()  # the caps below are counted one command at a time
    running = Automation.objects.filter(bot=bot, is_enabled=True).exclude(created_by_open_id="")
    mine = running.filter(created_by_open_id=parsed.sender_open_id).count()
    if mine >= settings.AMUX_SCHEDULES_PER_PERSON:
        return str(SCHEDULE_TOO_MANY_PERSON) % {"count": mine, "max": settings.AMUX_SCHEDULES_PER_PERSON}
    here = running.filter(feishu_chat_id=parsed.chat_id).count()
    if here >= settings.AMUX_SCHEDULES_PER_CHAT:
        return str(SCHEDULE_TOO_MANY) % {"count": here, "max": settings.AMUX_SCHEDULES_PER_CHAT}
    return ""


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
    except CronError as error:
        return CommandReply(str(SCHEDULE_BAD_CRON) % {"cron": error.cron})
    except WhenError:
        return CommandReply(str(SCHEDULE_USAGE) % {"tz": tz})
    with transaction.atomic():  # counted and made under the bot row's lock (`_refusal`)
        refusal = _refusal(bot=bot, parsed=parsed, workspace=workspace, when=when)
        if refusal:
            return CommandReply(refusal)
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
            feishu_chat_type=CHAT_TYPE_P2P if parsed.is_direct else CHAT_TYPE_GROUP,
        )
    number = len(_chat_schedules(bot=bot, chat_id=parsed.chat_id))
    numbers = {"n": number, "cron": when.cron, "tz": tz, "next": _next_run(schedule, tz)}
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
            line = f"{number}. {cron_text(automation.schedule)} ({tz}) · {who}: {text_preview(automation.prompt)}"
            lines.append(line if automation.is_enabled else f"{line} {SCHEDULE_STOPPED_MARK}")
        return CommandReply("\n".join(lines))
    if command.action == SCHEDULE_CANCEL:
        schedules = _chat_schedules(bot=bot, chat_id=parsed.chat_id)
        number = int(command.rest) if command.rest.isdigit() else 0
        if not 1 <= number <= len(schedules):
            return CommandReply(str(SCHEDULE_NO_SUCH) % {"n": command.rest})
        automation_delete(automation=schedules[number - 1])
        return CommandReply(str(SCHEDULE_CANCELLED) % {"n": number})
    return _create(bot=bot, parsed=parsed, workspace=workspace, text=command.rest)
