"""Admin: turn list and detail (model input as sent, output, usage, retries), automations with "Run now",
and the providers' / models' "test connection" action."""

import pytest
from django.contrib.messages import get_messages
from django_celery_beat.models import CrontabSchedule, PeriodicTask

from agents.models import Automation, Message, Provider, Turn
from agents.services.automations import automation_create
from agents.services.threads import message_create
from agents.services.turns import turn_get_or_create, turn_run
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory
from tests.stubs.llm_servers import AUTH_BODIES, SERVER_ERROR_BODIES, StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db


def stub_model(llm_stub, **provider_fields):
    provider = ProviderFactory(
        name="stub-openai", kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="sk-secret-999",
        max_retries=0, **provider_fields,
    )  # fmt: skip
    return LLMModelFactory(provider=provider, name="gpt-4o")


def asked(*, bot, thread, trigger, source_message_id, content="hi"):
    """A turn whose user message is stored (as a channel's prepare leaves it)."""
    message = message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content=content)
    turn, _ = turn_get_or_create(
        bot=bot, thread=thread, trigger=trigger, source_message_id=source_message_id, user_message=message
    )
    return turn


def test_turn_list_shows_status_trigger_bot_duration_tokens_and_error(admin_client, llm_stub):
    # given: one delivered turn and one failed turn
    bot = BotFactory(slug="helper", primary_model=stub_model(llm_stub))
    thread = ThreadFactory(bot=bot)
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(body=openai_chat_body(text="fine", input_tokens=123, output_tokens=45)),
        StubResponse(status=401, body=AUTH_BODIES["openai_chat"]),
    )
    ok = asked(bot=bot, thread=thread, trigger=Turn.Trigger.MENTION, source_message_id="om_1")
    turn_run(turn_id=ok.pk)
    bad = asked(bot=bot, thread=thread, trigger=Turn.Trigger.DM, source_message_id="om_2")
    turn_run(turn_id=bad.pk)
    # when
    response = admin_client.get("/admin/agents/turn/")
    # then
    page = response.content.decode()
    assert response.status_code == 200
    assert "123 / 45" in page
    assert "AuthenticationError: stub-openai: Incorrect API key provided" in page
    assert "delivered" in page.lower() and "failed" in page.lower()
    assert "sk-secret-999" not in page


def test_turn_detail_shows_model_input_as_sent_output_usage_and_retry_history(admin_client, llm_stub):
    # given: a turn that needed a retry
    bot = BotFactory(primary_model=stub_model(llm_stub), system_prompt="You are Helper.")
    thread = ThreadFactory(bot=bot)
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(status=500, body=SERVER_ERROR_BODIES["openai_chat"]),
        StubResponse(body=openai_chat_body(text="The answer is 42.", input_tokens=9, output_tokens=6)),
    )
    turn = asked(bot=bot, thread=thread, trigger=Turn.Trigger.MENTION, source_message_id="om_3")
    from agents.tasks import turn_run_task

    turn_run_task.delay(turn.pk)
    # when
    response = admin_client.get(f"/admin/agents/turn/{turn.pk}/change/")
    # then
    page = response.content.decode()
    assert response.status_code == 200
    assert "The answer is 42." in page  # output
    # the request body as sent (output cap 4096, undeclared 8192 window: a quarter of it, 2048, is requested)
    assert "&quot;max_tokens&quot;: 2048" in page
    assert "You are Helper." in page
    assert "&quot;outcome&quot;: &quot;retry&quot;" in page and "&quot;outcome&quot;: &quot;ok&quot;" in page
    assert '<th>output tokens <small class="quiet">output_tokens</small></th><td>6</td>' in page  # the usage is a table
    assert 'id="tool-calls-none"' in page  # no tool was called: the timeline says so (issue 27)
    assert "sk-secret-999" not in page


def test_automation_added_in_the_admin_gets_its_beat_schedule(admin_client):
    # given
    bot = BotFactory()
    schedule = CrontabSchedule.objects.create(minute="30", hour="8")
    # when
    response = admin_client.post(
        "/admin/agents/automation/add/",
        {
            "bot": bot.pk,
            "name": "morning",
            "prompt": "Good morning summary.",
            "schedule": schedule.pk,
            "is_enabled": "on",
        },
    )
    # then
    assert response.status_code == 302
    automation = Automation.objects.get()
    task = PeriodicTask.objects.get()
    assert (automation.periodic_task_id, task.crontab_id, task.enabled) == (task.pk, schedule.pk, True)


def test_automation_run_now_action_runs_it(admin_client):
    # given
    bot = BotFactory(name="Reporter")
    automation = automation_create(
        bot=bot, name="report", prompt="Report.", schedule=CrontabSchedule.objects.create(minute="0")
    )
    # when
    response = admin_client.post(
        "/admin/agents/automation/", {"action": "run_now", "_selected_action": [automation.pk]}, follow=True
    )
    # then
    assert [str(m) for m in get_messages(response.wsgi_request)] == ["Queued 1 automation run."]
    automation.refresh_from_db()
    kinds = list(Message.objects.filter(thread=automation.thread).order_by("id").values_list("kind", flat=True))
    assert kinds == ["user_message", "agent_reply"]


def test_automation_run_now_with_the_broker_down_reports_it_instead_of_a_500(admin_client, mocker):
    from kombu.exceptions import OperationalError

    from agents.tasks import automation_run_task

    # given: the broker refuses the task
    automation = automation_create(
        bot=BotFactory(), name="report", prompt="Report.", schedule=CrontabSchedule.objects.create(minute="0")
    )
    mocker.patch.object(automation_run_task, "apply_async", side_effect=OperationalError("Connection refused"))
    # when
    response = admin_client.post(
        "/admin/agents/automation/", {"action": "run_now", "_selected_action": [automation.pk]}, follow=True
    )
    # then
    assert response.status_code == 200
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "report: the task queue is unreachable, try again later."
    ]
    assert not Message.objects.exists()


def test_test_connection_on_a_model_reports_success(admin_client, llm_stub):
    # given
    model = stub_model(llm_stub)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="pong")))
    # when
    response = admin_client.post(
        "/admin/agents/llmmodel/", {"action": "test_connection", "_selected_action": [model.pk]}, follow=True
    )
    # then
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert message.startswith("stub-openai / gpt-4o: OK in ")
    assert message.endswith("answered 'pong'")
    assert llm_stub.requests[0].json["messages"] == [{"role": "user", "content": "Reply with the single word: pong"}]
    assert llm_stub.requests[0].json["max_tokens"] == 16


def test_test_connection_on_a_provider_reports_the_error(admin_client, llm_stub):
    # given
    model = stub_model(llm_stub)
    llm_stub.enqueue("openai_chat", StubResponse(status=401, body=AUTH_BODIES["openai_chat"]))
    # when
    response = admin_client.post(
        "/admin/agents/provider/",
        {"action": "test_connection", "_selected_action": [model.provider_id]},
        follow=True,
    )
    # then
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "stub-openai / gpt-4o: AuthenticationError: stub-openai: Incorrect API key provided: sk-***."
    ]


def test_test_connection_labels_local_rules_as_rule_based(admin_client):
    # given
    model = LLMModelFactory(provider=ProviderFactory(name="offline", kind=Provider.Kind.LOCAL_RULES), name="rules")
    # when
    response = admin_client.post(
        "/admin/agents/llmmodel/", {"action": "test_connection", "_selected_action": [model.pk]}, follow=True
    )
    # then
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert message.startswith("offline / rules (rule-based, offline): OK in ")
    assert "[local_rules · rule-based echo]" in message


def test_l2_delivery_failed_turns_are_listed_by_the_status_filter(admin_client, llm_stub):
    # given: one delivered turn and one whose delivery was given up on
    bot = BotFactory(slug="helper", primary_model=stub_model(llm_stub))
    thread = ThreadFactory(bot=bot)
    asked(bot=bot, thread=thread, trigger=Turn.Trigger.REST, source_message_id="rest:1")
    lost = asked(bot=bot, thread=thread, trigger=Turn.Trigger.MENTION, source_message_id="om_lost")
    Turn.objects.filter(pk=lost.pk).update(
        status=Turn.Status.DELIVERY_FAILED, error="Gave up after 5 delivery attempts. Last error: 503"
    )
    # when
    response = admin_client.get("/admin/agents/turn/", {"status__exact": "delivery_failed"})
    # then: only the lost one, with its reason
    page = response.content.decode()
    assert response.status_code == 200
    assert response.context["cl"].result_count == 1
    assert list(response.context["cl"].result_list) == [lost]
    assert "Gave up after 5 delivery attempts" in page
