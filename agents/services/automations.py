"""Automations: a bot's scheduled prompt, run by Celery beat (django-celery-beat) into its own thread.

Creating or saving an automation syncs one `PeriodicTask` ("automation:<id>") that calls
`agents.tasks.automation_run_task(automation_id)` on the automation's crontab; disabling the automation disables
the periodic task (so does a disabled bot at the automation's next save), and the task itself skips a scheduled
run of a disabled automation or of a disabled bot. Each run appends a user_message (mask 0) and an agent_reply (mask 1) to the
automation's own thread (runtime_mode automation, created on the first run): runs show in /history and
never in context (V2). A run is a Turn with source "automation:<automation id>:<run id>", so a redelivered
run task (same run id) never runs twice.

A run goes through the one turn pipeline (agents.services.turns): its channel is `automation`, whose prepare
stores the prompt. Posting each run's answer to a Feishu chat (`feishu_chat_id`) is that channel's delivery: the
Feishu bridge registers an automation channel that posts it with the same uuids and retries as any reply (agents
never imports the bridge); without a chat, replied is delivered at once.

U4 (issue 35): each run is admitted for its principal before its turn exists (the channel's `run_admission`; the
bridge asks its one admission check for a schedule's creator in the chat, every run). A refused run calls no model:
its turn is recorded skipped with the refusal, the automation is stopped (`automation_stop`: disabled, and its
periodic task), and the channel tells the person it acted for once.
"""

import json
import logging
import uuid

from django.db import transaction
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from agents.models import Automation, Bot, Thread, Turn
from agents.principals import DOOR_AUTOMATION, DOOR_SCHEDULE, Admission, Principal
from agents.services.threads import thread_create
from agents.services.turns import automation_channel, turn_get_or_create, turn_mark_skipped, turn_run
from agents.tasks import automation_run_task
from core.tasks_enqueue import task_enqueue

logger = logging.getLogger(__name__)

AUTOMATION_TASK_NAME = "agents.tasks.automation_run_task"


def periodic_task_name(*, automation: Automation) -> str:
    return f"automation:{automation.pk}"


@transaction.atomic
def automation_schedule_sync(*, automation: Automation) -> PeriodicTask:
    """Create or update the automation's PeriodicTask to match it (schedule, enabled)."""
    enabled = automation.is_enabled and automation.bot.is_enabled
    task, _ = PeriodicTask.objects.update_or_create(
        name=periodic_task_name(automation=automation),
        defaults={
            "task": AUTOMATION_TASK_NAME,
            "crontab": automation.schedule,
            "interval": None,
            "args": json.dumps([automation.pk]),
            "enabled": enabled,
            "description": f"Automation {automation.name!r} of bot {automation.bot.slug}",
        },
    )
    if automation.periodic_task_id != task.pk:
        automation.periodic_task = task
        Automation.objects.filter(pk=automation.pk).update(periodic_task=task)
    return task


@transaction.atomic
def automation_create(
    *,
    bot: Bot,
    name: str,
    prompt: str,
    schedule: CrontabSchedule,
    feishu_chat_id: str = "",
    is_enabled: bool = True,
    feishu_topic_message_id: str = "",
    created_by_open_id: str = "",
    feishu_chat_type: str = "",
) -> Automation:
    """`feishu_topic_message_id`, `created_by_open_id` and `feishu_chat_type`: an automation made with /schedule in a
    chat (issue 25) posts into that topic, remembers who asked for it and whether the chat is a DM (U4)."""
    automation = Automation(
        bot=bot,
        name=name,
        prompt=prompt,
        schedule=schedule,
        feishu_chat_id=feishu_chat_id,
        is_enabled=is_enabled,
        feishu_topic_message_id=feishu_topic_message_id,
        created_by_open_id=created_by_open_id,
        feishu_chat_type=feishu_chat_type,
    )
    automation.full_clean(exclude=["periodic_task", "thread"])
    automation.save()
    automation_schedule_sync(automation=automation)
    logger.info("automation created", extra={"automation_id": automation.pk, "bot": bot.slug})
    return automation


@transaction.atomic
def automation_save(*, automation: Automation) -> Automation:
    """Save an edited automation (admin) and re-sync its schedule."""
    automation.save()
    automation_schedule_sync(automation=automation)
    return automation


@transaction.atomic
def automation_stop(*, automation: Automation) -> bool:
    """Disable an automation and its periodic task (U4); True only for the call that stopped it (a conditional
    UPDATE), so whoever stops it tells its creator once, however many runs or events race to stop it."""
    stopped = Automation.objects.filter(pk=automation.pk, is_enabled=True).update(is_enabled=False) == 1
    PeriodicTask.objects.filter(name=periodic_task_name(automation=automation)).update(enabled=False)
    automation.is_enabled = False
    if stopped:
        logger.info("automation stopped", extra={"automation_id": automation.pk, "bot": automation.bot.slug})
    return stopped


def automation_delete(*, automation: Automation) -> None:
    with transaction.atomic():
        PeriodicTask.objects.filter(name=periodic_task_name(automation=automation)).delete()
        automation.delete()


def automation_thread_get_or_create(*, automation: Automation) -> Thread:
    """The automation's own thread, created on the first run (row lock: two first runs make one thread)."""
    with transaction.atomic():
        locked = Automation.objects.select_for_update(of=("self",)).select_related("thread").get(pk=automation.pk)
        if locked.thread is None:
            locked.thread = thread_create(
                bot=automation.bot,
                runtime_mode=Thread.RuntimeMode.AUTOMATION,
                channel=Thread.Channel.AUTOMATION,
                title=f"Automation: {automation.name}"[:200],
            )
            locked.save(update_fields=["thread"])
    automation.thread = locked.thread
    return locked.thread


def automation_run_now(*, automation: Automation) -> bool:
    """Queue one run now ("Run now"), whatever the schedule says; False when the broker cannot take it.

    The run gets a fresh run id, so it is a turn of its own beside the scheduled ones (and runs even when the
    automation is disabled: asking for it is the operator's decision).
    """
    run_id = f"run-now-{uuid.uuid4().hex}"
    return task_enqueue(task=automation_run_task, args=[automation.pk, run_id], what="automation run")


def automation_principal(*, automation: Automation) -> tuple[Principal, Admission]:
    """U1: a run acts for the person who made the automation: a schedule's creator in Feishu (`/schedule`, whom the
    Feishu channel admits again at every run, U4), else the bot's owner, who made it in the console."""
    if automation.created_by_open_id:
        principal = Principal(open_id=automation.created_by_open_id)
        return principal, Admission(True, DOOR_SCHEDULE, "admitted", "the schedule's creator, checked at each run")
    principal = Principal(user_id=automation.bot.owner_id)
    return principal, Admission(True, DOOR_AUTOMATION, "admitted", "the bot's owner made this automation")


def automation_run(*, automation: Automation, run_id: str) -> str:
    """One run: the prompt as a user_message (mask 0) and the agent's answer (mask 1) in the automation thread.

    `run_id` names the run (the Celery task id, or a fresh uuid for "Run now"); the same run id never runs
    twice. Returns the turn's outcome; may raise `TurnRetryLater` (the task retries). A run its principal is no
    longer admitted for (U4) is recorded skipped, calls no model and stops the automation.
    """
    thread = automation_thread_get_or_create(automation=automation)
    channel = automation_channel()
    principal, admission = automation_principal(automation=automation)
    admission = channel.run_admission(automation=automation, principal=principal, admission=admission)
    turn, _ = turn_get_or_create(
        bot=automation.bot,
        thread=thread,
        trigger=Turn.Trigger.AUTOMATION,
        source_message_id=f"automation:{automation.pk}:{run_id}"[:100],
        principal=principal,
        admission=admission,
    )
    if admission.allowed:
        return turn_run(turn_id=turn.pk)
    turn_mark_skipped(turn=turn, reason=f"Not admitted: {admission.reason}.")
    if automation_stop(automation=automation):
        channel.run_stopped(automation=automation, admission=admission)
    return str(Turn.Status.SKIPPED)
