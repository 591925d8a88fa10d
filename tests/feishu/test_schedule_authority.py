"""U4 (ARCHITECTURE §12.0, issue 35) through the real path: a signed webhook -> lark-oapi -> the worker (Celery
eager) -> the Feishu stub, and beat's own task for each run. A schedule runs as its creator and is admitted for
them at every run; it stops, with one line to its creator, when the bot leaves the chat or the creator may no
longer use the bot there; creation is admitted for the creator and capped per chat and per person, with a shortest
interval; a cron string Celery refuses gets one answer and is never retried."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from agents.models import Automation, Bot, Turn
from amuxweb.celery import app as celery_app
from feishu.inbound.intake import inbound_events_sweep
from feishu.models import InboundEvent
from tests.agents.test_llm_adapters import model_for
from tests.feishu.conftest import fixture_payload
from threadcontext.models import Workspace
from threadcontext.selectors import workspace_cache_forget

pytestmark = pytest.mark.django_db

GROUP = "oc_group"
DM = "oc_dm_alice"
STOPPED_LEFT = 'I stopped your schedule "status of the build" (*/30 * * * *): I am no longer in the chat it posts to.'
STOPPED_REFUSED = (
    'I stopped your schedule "status of the build" (*/30 * * * *): you may no longer use me in the chat it posts to.'
)


@pytest.fixture
def bot(make_feishu_bot, llm_stub) -> Bot:
    return make_feishu_bot(primary_model=model_for("openai_chat", llm_stub), reply_format="text", receipt_emoji="")


def command(feishu, bot: Bot, text: str, *, sender: str = "ou_alice", chat_id: str = GROUP) -> str:
    """A command as `sender` says it (an @ of the bot in a group, a DM otherwise); the bot's one answer."""
    sent_before = len(feishu.stub.sent)
    if chat_id == GROUP:
        feishu.say(bot, text=text, mention=[bot], sender=sender, chat_id=chat_id)
    else:
        feishu.say(bot, text=text, sender=sender, chat_id=chat_id, chat_type="p2p")
    assert len(feishu.stub.sent) == sent_before + 1
    return feishu.stub.sent_texts()[-1]


def scheduled(feishu, bot: Bot, *, chat_id: str = GROUP) -> Automation:
    reply = command(feishu, bot, "/schedule every 30m status of the build", chat_id=chat_id)
    assert reply.startswith("Scheduled as number 1 (*/30 * * * *, UTC)")
    return Automation.objects.get()


def beat_runs(automation: Automation) -> None:
    """What beat sends when the schedule is due: its periodic task's task with its args (eager here; what it leaves
    for after its commit runs, as it would in a worker, where no transaction is open around a task)."""
    periodic = PeriodicTask.objects.get(name=f"automation:{automation.pk}")
    with TestCase.captureOnCommitCallbacks(execute=True):
        celery_app.tasks[periodic.task].apply_async(args=[automation.pk])


def bot_removed(feishu, bot: Bot, *, chat_id: str = GROUP) -> None:
    """Feishu's im.chat.member.bot.deleted_v1 for the bot and `chat_id`."""
    payload = fixture_payload("bot_added_to_chat", bot=bot)
    payload["header"].update(event_type="im.chat.member.bot.deleted_v1", event_id="d" * 32)
    payload["event"]["chat_id"] = chat_id
    assert feishu.post(bot, payload).status_code == 200


def direct_lines(feishu, *, open_id: str) -> list[str]:
    """What the bot posted to a person directly (message.create with receive_id_type open_id)."""
    return [
        feishu.stub.message_text(sent)
        for sent in feishu.stub.sent
        if sent["route"] == "create" and sent.get("receive_id_type") == "open_id" and sent["receive_id"] == open_id
    ]


def assert_stopped(automation: Automation) -> None:
    automation.refresh_from_db()
    assert automation.is_enabled is False
    assert PeriodicTask.objects.get(name=f"automation:{automation.pk}").enabled is False


def test_u4_removing_the_bot_stops_its_schedules_there_at_once_and_tells_the_creator_once(feishu, bot, llm_stub):
    # given a schedule Alice made in a group
    automation = scheduled(feishu, bot)
    sent_before = len(feishu.stub.sent)

    # when the bot is removed from the group (the event delivered twice: Feishu retries)
    bot_removed(feishu, bot)
    bot_removed(feishu, bot)

    # then the schedule is stopped at removal time, and Alice hears it once, directly (the chat is gone)
    assert_stopped(automation)
    assert direct_lines(feishu, open_id="ou_alice") == [STOPPED_LEFT]
    assert len(feishu.stub.sent) == sent_before + 1
    # and beat's runs that were already due start no model call and post nothing, ever
    beat_runs(automation)
    beat_runs(automation)
    assert llm_stub.requests_for("openai_chat") == []
    assert Turn.objects.count() == 0
    assert len(feishu.stub.sent) == sent_before + 1


def test_u4_a_run_in_a_chat_the_bot_has_left_calls_no_model_and_stops_the_schedule(feishu, bot, llm_stub):
    # given a schedule whose chat the workspace says the bot left (retired), with no removal event seen for it
    automation = scheduled(feishu, bot)
    Workspace.objects.filter(bot_profile=bot.slug, chat_id=GROUP).update(retired_at=timezone.now())
    workspace_cache_forget(bot_profile=bot.slug, chat_id=GROUP)
    sent_before = len(feishu.stub.sent)

    # when beat runs it, twice
    beat_runs(automation)
    beat_runs(automation)

    # then no model call, the schedule stopped, one line to Alice and nothing in the chat
    assert llm_stub.requests_for("openai_chat") == []
    assert_stopped(automation)
    run = Turn.objects.get()
    assert run.status == Turn.Status.SKIPPED
    assert (run.principal_open_id, run.admission["allowed"], run.admission["rule"]) == ("ou_alice", False, "bot_left")
    assert direct_lines(feishu, open_id="ou_alice") == [STOPPED_LEFT]
    assert len(feishu.stub.sent) == sent_before + 1


def test_u4_a_creator_taken_off_the_chats_list_is_refused_at_the_next_run_and_told_once(feishu, bot, llm_stub):
    # given a group that lists Alice and Bob, and Alice's schedule there (it runs once, for her)
    Workspace.objects.create(bot_profile=bot.slug, chat_id=GROUP, allowed_open_ids=["ou_alice", "ou_bob"])
    automation = scheduled(feishu, bot)
    beat_runs(automation)
    assert len(llm_stub.requests_for("openai_chat")) == 1
    first = Turn.objects.get()
    assert (first.status, first.principal_open_id, first.admission["door"]) == ("delivered", "ou_alice", "schedule")

    # when the chat takes Alice off its list, and beat runs the schedule twice more
    workspace = Workspace.objects.get(bot_profile=bot.slug, chat_id=GROUP)
    workspace.allowed_open_ids = ["ou_bob"]
    workspace.save()
    workspace_cache_forget(bot_profile=bot.slug, chat_id=GROUP)
    sent_before = len(feishu.stub.sent)
    beat_runs(automation)
    beat_runs(automation)

    # then the model is not called again, the schedule stopped, and Alice is told once (not the chat)
    assert len(llm_stub.requests_for("openai_chat")) == 1
    assert_stopped(automation)
    refused = Turn.objects.exclude(pk=first.pk).get()
    assert (refused.status, refused.admission["rule"]) == (Turn.Status.SKIPPED, "not_allowed")
    assert direct_lines(feishu, open_id="ou_alice") == [STOPPED_REFUSED]
    assert len(feishu.stub.sent) == sent_before + 1


def test_u4_a_dm_schedule_stops_when_the_bots_dm_policy_no_longer_admits_its_creator(feishu, bot, llm_stub):
    # given a schedule Alice made in her DM with the bot
    automation = scheduled(feishu, bot, chat_id=DM)
    assert automation.feishu_chat_type == "p2p"
    # when the owner limits direct messages to the owner, and beat runs it
    Bot.objects.filter(pk=bot.pk).update(dm_policy=Bot.DmPolicy.OWNER, feishu_owner_open_id="ou_owner")
    beat_runs(automation)
    # then no model call; stopped; Alice is told once, directly
    assert llm_stub.requests_for("openai_chat") == []
    assert_stopped(automation)
    assert Turn.objects.get().admission["rule"] == "dm_policy"
    assert direct_lines(feishu, open_id="ou_alice") == [
        'I stopped your schedule "status of the build" (*/30 * * * *): you may no longer message me directly.'
    ]


def test_u4_schedules_are_capped_per_person_and_per_chat(feishu, bot, settings):
    # given caps of 2 per person and 3 per chat
    settings.AMUX_SCHEDULES_PER_PERSON, settings.AMUX_SCHEDULES_PER_CHAT = 2, 3
    assert command(feishu, bot, "/schedule daily 09:00 one").startswith("Scheduled as number 1")
    assert command(feishu, bot, "/schedule daily 10:00 two").startswith("Scheduled as number 2")

    # when Alice asks for a third, here and in her DM
    here = command(feishu, bot, "/schedule daily 11:00 three")
    in_dm = command(feishu, bot, "/schedule daily 11:00 three", chat_id=DM)

    # then both are refused: a person has at most 2
    person_cap = "You already have 2 schedules of mine (at most 2 per person); cancel one first."
    assert (here, in_dm) == (person_cap, person_cap)
    # and the chat is capped at 3, whoever asks
    assert command(feishu, bot, "/schedule daily 12:00 bob's", sender="ou_bob").startswith("Scheduled as number 3")
    chat_cap = "This chat already has 3 schedules of mine (at most 3 per chat); cancel one first."
    assert command(feishu, bot, "/schedule daily 13:00 carol's", sender="ou_carol") == chat_cap
    assert sorted(Automation.objects.values_list("prompt", flat=True)) == ["bob's", "one", "two"]
    assert PeriodicTask.objects.filter(name__startswith="automation:").count() == 3


def test_u4_the_default_caps_are_ten_per_chat_and_five_per_person(settings):
    assert (settings.AMUX_SCHEDULES_PER_CHAT, settings.AMUX_SCHEDULES_PER_PERSON) == (10, 5)
    assert settings.AMUX_SCHEDULE_MIN_INTERVAL_MINUTES == 15


@pytest.mark.parametrize(
    ("when", "every"),
    [("every 1m", 1), ("* * * * *", 1), ("every 10m", 10), ("0,5 9 * * *", 5), ("*/14 * * * *", 4)],
)
def test_u4_a_schedule_more_often_than_the_minimum_is_refused_with_a_sentence_naming_it(feishu, bot, when, every):
    # when a schedule would run more often than every 15 minutes (`*/14` runs at :56 and at the next hour's :00)
    reply = command(feishu, bot, f"/schedule {when} ping")
    # then it is refused, naming the minimum, and nothing is made
    assert reply == f"I run a schedule at most once every 15 minutes; this one would run only {every} minute(s) apart."
    assert Automation.objects.count() == 0
    assert PeriodicTask.objects.filter(name__startswith="automation:").count() == 0


def test_u4_the_minimum_interval_is_a_setting_and_its_minimum_itself_is_allowed(feishu, bot, settings):
    assert command(feishu, bot, "/schedule every 15m ping").startswith("Scheduled as number 1 (*/15 * * * *")
    settings.AMUX_SCHEDULE_MIN_INTERVAL_MINUTES = 120
    refused = command(feishu, bot, "/schedule every 1h ping")
    assert refused == "I run a schedule at most once every 120 minutes; this one would run only 60 minute(s) apart."
    assert Automation.objects.count() == 1


@pytest.mark.parametrize("cron", [", * * * *", "*/0 * * * *", "1- * * * *", "0 9 31 2 *", "0 9 * * 1-"])
def test_u4_a_cron_string_celery_refuses_gets_one_answer_and_is_never_retried(feishu, bot, cron):
    # when a cron string Celery cannot run is scheduled
    reply = command(feishu, bot, f"/schedule {cron} x")

    # then one sentence answers it, nothing is made, and the event is done (not left for the sweeper's retries)
    assert reply == (
        f'"{cron}" is not a cron string I can run. A cron string is five fields (minute hour day-of-month month '
        "day-of-week), such as 0 9 * * 1-5."
    )
    assert Automation.objects.count() == 0
    event = InboundEvent.objects.get()
    assert (event.status, event.attempts) == (InboundEvent.Status.DONE, 1)
    assert inbound_events_sweep(now=timezone.now() + timedelta(hours=1)) == []
    assert len(feishu.stub.sent) == 1


def test_u4_creating_a_schedule_is_admitted_for_its_creator_at_the_schedule_door(feishu, bot):
    # given a chat whose command list names Carol but whose list of people who may use the bot does not
    Workspace.objects.create(
        bot_profile=bot.slug, chat_id=GROUP, command_open_ids=["ou_carol"], allowed_open_ids=["ou_alice"]
    )
    # when Carol schedules (she may run commands, but a run for her would be refused)
    reply = command(feishu, bot, "/schedule daily 09:00 hello", sender="ou_carol")
    # then it is refused at once, saying why, and nothing is made
    assert reply == "I cannot schedule that for you here: this chat's list of people who may use me leaves you out."
    assert Automation.objects.count() == 0


def test_u4_a_chat_that_turned_the_bots_replies_off_takes_no_schedule(feishu, bot):
    Workspace.objects.create(bot_profile=bot.slug, chat_id=GROUP, reply_mode="off", command_open_ids=["ou_alice"])
    reply = command(feishu, bot, "/schedule daily 09:00 hello")
    assert reply == "I cannot schedule that for you here: this chat turned my replies off."
    assert Automation.objects.count() == 0
