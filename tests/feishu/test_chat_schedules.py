"""Issue 25 (ARCHITECTURE §11.4 K4) through the webhook: `/schedule` makes an automation on a crontab in the
workspace's time zone that posts into this chat and topic; beat (its own entry, with a moved clock) finds it due
at its time and the run it starts posts into the topic; `/schedule list` and `/schedule cancel`; refusals."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import ModelEntry

from agents.models import Automation, Turn
from amuxweb.celery import app as celery_app
from feishu.commands.when import WhenError, schedule_parse
from tests.agents.test_llm_adapters import model_for
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db

ROOT = "om_root"
TOPIC = {"root_id": ROOT, "thread_id": "omt_1", "parent_id": ROOT}


@pytest.fixture
def bot(make_feishu_bot, llm_stub):
    return make_feishu_bot(primary_model=model_for("openai_chat", llm_stub), reply_format="text")


def command(feishu, bot, text: str, *, sender: str = "ou_alice") -> str:
    sent_before = len(feishu.stub.sent)
    feishu.say(bot, text=text, mention=[bot], sender=sender, **TOPIC)
    assert len(feishu.stub.sent) == sent_before + 1
    return feishu.stub.sent_texts()[-1]


def at(moment: datetime, cron) -> None:
    """Move the schedule's clock (what beat's entry asks `now`) to `moment`."""
    cron.nowfun = lambda: moment.astimezone(cron.tz)


def test_k4_a_schedule_from_a_topic_runs_at_its_time_in_the_workspace_zone_and_posts_into_the_topic(
    feishu, bot, llm_stub
):
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group", time_zone="Asia/Shanghai")
    feishu.say(bot, text="standup topic", message_id=ROOT)

    reply = command(feishu, bot, "/schedule daily 09:00 Summarise yesterday's commits")

    assert reply.startswith("Scheduled as number 1 (0 9 * * *, Asia/Shanghai)")
    automation = Automation.objects.get()
    assert (automation.feishu_chat_id, automation.feishu_topic_message_id) == ("oc_group", ROOT)
    assert automation.created_by_open_id == "ou_alice" and automation.prompt == "Summarise yesterday's commits"
    assert Turn.objects.count() == 0  # a command starts no turn

    # beat's own entry for the periodic task, its clock moved: not due at 08:59 Shanghai, due at 09:00
    periodic = PeriodicTask.objects.get(name=f"automation:{automation.pk}")
    periodic.last_run_at = datetime(2026, 12, 4, 1, 30, tzinfo=UTC)  # 09:30 in Shanghai, the day before
    entry = ModelEntry(periodic, app=celery_app)
    at(datetime(2026, 12, 5, 0, 59, tzinfo=UTC), entry.schedule)
    assert entry.is_due().is_due is False
    at(datetime(2026, 12, 5, 1, 0, 5, tzinfo=UTC), entry.schedule)
    assert entry.is_due().is_due is True

    # what beat then sends: the entry's task with its args (eager here)
    sent_before = len(feishu.stub.sent)
    celery_app.tasks[entry.task].apply_async(args=entry.args, kwargs=entry.kwargs)

    run = Turn.objects.get()
    assert run.trigger == Turn.Trigger.AUTOMATION and run.status == Turn.Status.DELIVERED
    [posted] = feishu.stub.sent[sent_before:]
    assert posted["route"] == "reply" and posted["parent_id"] == ROOT and posted["reply_in_thread"] is True
    assert "Summarise yesterday's commits" in str(llm_stub.requests_for("openai_chat")[-1].json)


def test_k4_list_and_cancel_by_number(feishu, bot):
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group")
    feishu.say(bot, text="topic", message_id=ROOT)
    command(feishu, bot, "/schedule weekdays 18:30 What is still open?")
    command(feishu, bot, "/schedule every 2h Check the build")

    listed = command(feishu, bot, "/schedule list")
    assert listed.splitlines()[0] == "My schedules in this chat (2):"
    assert listed.splitlines()[1].startswith('1. 30 18 * * 1-5 (UTC) · <at user_id="ou_alice"></at>')
    assert listed.splitlines()[2].startswith("2. 0 */2 * * * (UTC)")

    assert command(feishu, bot, "/schedule cancel 1") == "Cancelled schedule number 1."
    assert command(feishu, bot, "/schedule cancel 7") == "There is no schedule number 7 here; send /schedule list."
    assert list(Automation.objects.values_list("prompt", flat=True)) == ["Check the build"]
    assert PeriodicTask.objects.filter(name__startswith="automation:").count() == 1
    assert command(feishu, bot, "/schedule someday soon").startswith("Usage: /schedule <when> <prompt>.")


def test_k4_owner_only_refuses_a_stranger_and_makes_nothing(feishu, bot):
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_group", mode="owner_only", owner_open_id="ou_owner")
    feishu.say(bot, text="topic", message_id=ROOT, sender="ou_owner")

    refused = command(feishu, bot, "/schedule daily 09:00 hello", sender="ou_alice")

    assert refused == 'Only the workspace owner (<at user_id="ou_owner"></at>) may run /schedule here.'
    assert Automation.objects.count() == 0


@pytest.mark.parametrize(
    ("text", "cron", "prompt"),
    [
        ("daily 09:00 standup", "0 9 * * *", "standup"),
        ("weekdays 18:30 wrap up", "30 18 * * 1-5", "wrap up"),
        ("weekends 10:00 relax", "0 10 * * 0,6", "relax"),
        ("mon 10:00 plan\nthe week", "0 10 * * 1", "plan\nthe week"),
        ("mon,wed,fri 7:05 gym", "5 7 * * 1,3,5", "gym"),
        ("every 2h ping", "0 */2 * * *", "ping"),
        ("every 30m ping", "*/30 * * * *", "ping"),
        ("0 9 1 * * monthly report", "0 9 1 * *", "monthly report"),
    ],
)
def test_k4_the_when_grammar(text, cron, prompt):
    when, parsed_prompt = schedule_parse(text)
    assert (when.cron, parsed_prompt) == (cron, prompt)


@pytest.mark.parametrize(
    "text", ["daily 25:00 x", "every 0h x", "every 90m x", "daily 09:00", "61 * * * * x", "soon x"]
)
def test_k4_what_the_grammar_refuses(text):
    with pytest.raises(WhenError):
        schedule_parse(text)
