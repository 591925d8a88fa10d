"""Automations: beat schedule sync, runs into the automation's own thread with masks 0/1 (V2), idempotent runs."""

import json

import pytest
from django.core.exceptions import ValidationError
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from agents.llm.local_rules import ECHO_LABEL
from agents.models import Automation, Message, Provider, Thread, Turn
from agents.selectors import context_messages_list, message_history_page
from agents.services.automations import (
    AUTOMATION_TASK_NAME,
    automation_create,
    automation_delete,
    automation_run,
    automation_save,
)
from agents.tasks import automation_run_task
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def bot():
    model = LLMModelFactory(provider=ProviderFactory(kind=Provider.Kind.LOCAL_RULES), name="rules")
    return BotFactory(slug="reporter", name="Reporter", primary_model=model)


@pytest.fixture
def daily():
    return CrontabSchedule.objects.create(minute="0", hour="9", day_of_week="*", day_of_month="*", month_of_year="*")


def test_creating_an_automation_syncs_its_periodic_task(bot, daily):
    # when
    automation = automation_create(bot=bot, name="daily report", prompt="Summarise yesterday.", schedule=daily)
    # then
    task = PeriodicTask.objects.get()
    assert automation.periodic_task_id == task.pk
    assert Automation.objects.get().periodic_task_id == task.pk
    assert (task.name, task.task, json.loads(task.args), task.crontab_id, task.enabled) == (
        f"automation:{automation.pk}",
        AUTOMATION_TASK_NAME,
        [automation.pk],
        daily.pk,
        True,
    )


def test_saving_an_automation_updates_schedule_and_enabled(bot, daily):
    # given
    automation = automation_create(bot=bot, name="daily report", prompt="Summarise.", schedule=daily)
    hourly = CrontabSchedule.objects.create(minute="0", hour="*")
    # when
    automation.schedule = hourly
    automation.is_enabled = False
    automation_save(automation=automation)
    # then: still one periodic task, now hourly and disabled
    task = PeriodicTask.objects.get()
    assert (task.crontab_id, task.enabled) == (hourly.pk, False)


def test_deleting_an_automation_removes_its_periodic_task(bot, daily):
    # given
    automation = automation_create(bot=bot, name="daily report", prompt="Summarise.", schedule=daily)
    # when
    automation_delete(automation=automation)
    # then
    assert (Automation.objects.count(), PeriodicTask.objects.count()) == (0, 0)


def test_v2_a_run_appends_prompt_mask_0_and_reply_mask_1_to_its_own_thread(bot, daily):
    # given
    automation = automation_create(bot=bot, name="daily report", prompt="Summarise yesterday.", schedule=daily)
    # when: two runs
    outcomes = [automation_run(automation=automation, run_id=run_id) for run_id in ("run-1", "run-2")]
    first, second = (turn.reply_message for turn in Turn.objects.order_by("id"))
    # then: one automation thread, created on the first run
    thread = Thread.objects.get()
    automation.refresh_from_db()
    assert automation.thread_id == thread.pk
    assert (thread.runtime_mode, thread.channel, thread.bot_id) == ("automation", "automation", bot.pk)
    rows = list(Message.objects.filter(thread=thread).order_by("id").values_list("kind", "visibility_mask", "author"))
    assert rows == [
        ("user_message", 0, "automation"),
        ("agent_reply", 1, "Reporter"),
        ("user_message", 0, "automation"),
        ("agent_reply", 1, "Reporter"),
    ]
    # runs show in /history and never in context: the second run saw no context
    assert [m.pk for m in message_history_page(thread=thread).messages] == [second.pk, first.pk]
    assert context_messages_list(thread=thread) == []
    assert second.content == f"{ECHO_LABEL} I received 0 context messages; you said: Summarise yesterday."
    assert outcomes == ["delivered", "delivered"]
    assert list(Turn.objects.order_by("id").values_list("trigger", "source_message_id", "status")) == [
        ("automation", f"automation:{automation.pk}:run-1", "delivered"),
        ("automation", f"automation:{automation.pk}:run-2", "delivered"),
    ]


def test_t2_the_same_run_twice_is_one_turn_and_one_reply(bot, daily):
    # given
    automation = automation_create(bot=bot, name="daily report", prompt="Summarise.", schedule=daily)
    # when: a redelivered run task (same run id)
    first = automation_run(automation=automation, run_id="task-abc")
    again = automation_run(automation=automation, run_id="task-abc")
    # then
    assert (first, again) == ("delivered", "already_finished")
    assert Turn.objects.count() == 1
    assert Message.objects.count() == 2


def test_the_beat_task_runs_an_enabled_automation_and_skips_a_disabled_one(bot, daily):
    # given
    enabled = automation_create(bot=bot, name="on", prompt="Go.", schedule=daily)
    disabled = automation_create(bot=bot, name="off", prompt="Go.", schedule=daily, is_enabled=False)
    # when: beat's call (no run id: the task id names the run)
    outcome = automation_run_task.delay(enabled.pk).get()
    skipped = automation_run_task.delay(disabled.pk).get()
    # then
    turn = Turn.objects.get()
    assert (outcome, turn.status) == ("delivered", "delivered")
    assert turn.reply_message.thread_id == Automation.objects.get(pk=enabled.pk).thread_id
    assert skipped is None
    assert Automation.objects.get(pk=disabled.pk).thread_id is None


def test_the_beat_task_skips_the_automation_of_a_bot_disabled_after_it_was_scheduled(bot, daily):
    # given: the periodic task was synced while the bot was enabled
    automation = automation_create(bot=bot, name="on", prompt="Go.", schedule=daily)
    bot.is_enabled = False
    bot.save()
    assert PeriodicTask.objects.get(pk=automation.periodic_task_id).enabled is True
    # when: beat fires
    result = automation_run_task.delay(automation.pk).get()
    # then: nothing is written (no thread, no turn, no message)
    assert result is None
    assert Automation.objects.get(pk=automation.pk).thread_id is None
    assert not Turn.objects.filter(bot=bot).exists()
    assert not Message.objects.filter(thread__bot=bot).exists()


def test_run_now_runs_a_disabled_automation(bot, daily):
    # given
    automation = automation_create(bot=bot, name="off", prompt="Go.", schedule=daily, is_enabled=False)
    # when: "Run now" passes its own run id
    outcome = automation_run_task.delay(automation.pk, "run-now-1").get()
    # then
    turn = Turn.objects.get()
    assert (outcome, turn.source_message_id) == ("delivered", f"automation:{automation.pk}:run-now-1")
    assert turn.reply_message.kind == "agent_reply"


def test_an_empty_prompt_is_refused_and_nothing_is_written(bot, daily):
    # when
    with pytest.raises(ValidationError) as caught:
        automation_create(bot=bot, name="empty", prompt="", schedule=daily)
    # then
    assert "prompt" in str(caught.value)
    assert (Automation.objects.count(), PeriodicTask.objects.count()) == (0, 0)
