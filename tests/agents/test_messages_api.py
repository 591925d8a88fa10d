"""REST chat: POST /api/v1/threads/{id}/messages/ and GET /api/v1/turns/{id}/ (ARCHITECTURE §7, V2, V4, T2)."""

import pytest

from agents.llm.local_rules import ECHO_LABEL
from agents.models import Message, Provider, Thread, Turn
from agents.services.turns import REST_MESSAGE_MAX_CHARS
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory, staff_user
from tests.clients import token_client
from tests.stubs.llm_servers import AUTH_BODIES, StubResponse

pytestmark = pytest.mark.django_db


@pytest.fixture
def people():
    owner = UserFactory(username="owner")
    model = LLMModelFactory(provider=ProviderFactory(kind=Provider.Kind.LOCAL_RULES), name="rules")
    return {
        "owner": owner,
        "other": UserFactory(username="other"),
        # U6: staff see and act on every owner's threads and turns through the model permissions
        "staff": staff_user("staff", "agents.view_thread", "agents.add_message", "agents.view_turn"),
        "bare staff": staff_user("bare-staff"),
        "anonymous": None,
        "bot": BotFactory(slug="planner", name="Planner", owner=owner, primary_model=model),
    }


def messages_url(thread: Thread) -> str:
    return f"/api/v1/threads/{thread.pk}/messages/"


def test_post_message_answers_202_with_the_message_and_turn_and_the_reply_shows_in_history(
    people, django_capture_on_commit_callbacks
):
    # given
    thread = ThreadFactory(bot=people["bot"])
    client = token_client(people["owner"])
    # when: the turn is enqueued on commit (eager here: it runs when the callbacks run)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(messages_url(thread), {"content": "  hello there  "}, format="json")
    # then
    assert response.status_code == 202
    body = response.json()
    user_message = Message.objects.get(thread=thread, kind=Message.Kind.USER_MESSAGE)
    turn = Turn.objects.get()
    assert body["turn_id"] == turn.pk
    assert body["message"] == {
        "id": user_message.pk,
        "kind": "user_message",
        "content": "hello there",
        "author": "owner",
        "created_at": body["message"]["created_at"],
        "visibility_mask": 3,
    }
    assert len(callbacks) == 1
    assert (turn.trigger, turn.source_message_id, turn.user_message_id) == (
        "rest",
        f"rest:{user_message.pk}",
        user_message.pk,
    )
    turn.refresh_from_db()
    assert turn.status == Turn.Status.DELIVERED
    history = client.get(f"/api/v1/threads/{thread.pk}/history/").json()["results"]
    assert [(m["kind"], m["content"]) for m in history] == [
        ("agent_reply", f"{ECHO_LABEL} I received 0 context messages; you said: hello there"),
        ("user_message", "hello there"),
    ]


def test_get_turn_reports_status_reply_and_error(people, django_capture_on_commit_callbacks):
    # given
    thread = ThreadFactory(bot=people["bot"])
    client = token_client(people["owner"])
    with django_capture_on_commit_callbacks(execute=True):
        turn_id = client.post(messages_url(thread), {"content": "hi"}, format="json").json()["turn_id"]
    # when
    response = client.get(f"/api/v1/turns/{turn_id}/")
    # then
    assert response.status_code == 200
    body = response.json()
    turn = Turn.objects.get(pk=turn_id)
    assert {key: body[key] for key in ("id", "bot", "thread", "trigger", "status", "error", "attempts")} == {
        "id": turn_id,
        "bot": "planner",
        "thread": thread.pk,
        "trigger": "rest",
        "status": "delivered",
        "error": "",
        "attempts": 1,
    }
    assert body["reply"]["id"] == turn.reply_message_id
    assert body["reply"]["kind"] == "agent_reply"
    assert body["duration_ms"] == turn.duration_ms


def test_get_turn_shows_a_failed_turns_error(people, llm_stub, django_capture_on_commit_callbacks):
    # given: the bot's provider refuses the key
    provider = ProviderFactory(kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), max_retries=0)
    bot = BotFactory(owner=people["owner"], primary_model=LLMModelFactory(provider=provider, name="gpt-4o"))
    llm_stub.enqueue("openai_chat", StubResponse(status=401, body=AUTH_BODIES["openai_chat"]))
    thread = ThreadFactory(bot=bot)
    client = token_client(people["owner"])
    with django_capture_on_commit_callbacks(execute=True):
        turn_id = client.post(messages_url(thread), {"content": "hi"}, format="json").json()["turn_id"]
    # when
    body = client.get(f"/api/v1/turns/{turn_id}/").json()
    # then
    assert body["status"] == "failed"
    assert body["error"] == f"AuthenticationError: {provider.name}: Incorrect API key provided: sk-***."
    assert body["reply"] is None


@pytest.mark.parametrize(
    ("role", "expected_status"),
    [("owner", 202), ("staff", 202), ("other", 404), ("bare staff", 404), ("anonymous", 401)],
)
def test_post_message_permission_matrix_writes_nothing_when_refused(people, role, expected_status):
    # given
    thread = ThreadFactory(bot=people["bot"])
    # when
    response = token_client(people[role]).post(messages_url(thread), {"content": "hi"}, format="json")
    # then
    assert response.status_code == expected_status
    expected_rows = 1 if expected_status == 202 else 0
    assert Message.objects.count() == expected_rows
    assert Turn.objects.count() == expected_rows


@pytest.mark.parametrize(
    ("role", "expected_status"),
    [("owner", 200), ("staff", 200), ("other", 404), ("bare staff", 404), ("anonymous", 401)],
)
def test_get_turn_permission_matrix(people, role, expected_status, django_capture_on_commit_callbacks):
    # given
    thread = ThreadFactory(bot=people["bot"])
    with django_capture_on_commit_callbacks(execute=True):
        turn_id = (
            token_client(people["owner"]).post(messages_url(thread), {"content": "hi"}, format="json").json()["turn_id"]
        )
    # when
    response = token_client(people[role]).get(f"/api/v1/turns/{turn_id}/")
    # then
    assert response.status_code == expected_status
    if role == "other":
        assert response.json() == {"message": "Turn not found.", "extra": {"turn_id": turn_id}}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"content": ""},
        {"content": "   "},
        {"content": None},
        {"content": "x" * (REST_MESSAGE_MAX_CHARS + 1)},
        {"text": "hi"},
        {"content": 123},
        {"content": True},
    ],
    ids=["missing", "empty", "blank", "null", "oversized", "wrong-field", "number", "boolean"],
)
def test_bad_message_is_400_and_writes_nothing(people, body, django_capture_on_commit_callbacks):
    # given
    thread = ThreadFactory(bot=people["bot"])
    # when
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = token_client(people["owner"]).post(messages_url(thread), body, format="json")
    # then
    assert response.status_code == 400
    assert response.json()["message"] == "Validation error"
    assert "content" in response.json()["extra"]["fields"]
    assert (Message.objects.count(), Turn.objects.count(), len(callbacks)) == (0, 0, 0)


def test_v4_a_client_supplied_mask_is_ignored(people, django_capture_on_commit_callbacks):
    # given: a REST thread in automation mode, and a client that tries to make its message visible to context
    thread = ThreadFactory(bot=people["bot"], runtime_mode=Thread.RuntimeMode.AUTOMATION, channel=Thread.Channel.REST)
    # when
    with django_capture_on_commit_callbacks(execute=True):
        response = token_client(people["owner"]).post(
            messages_url(thread), {"content": "run report", "visibility_mask": 3}, format="json"
        )
    # then
    assert response.status_code == 202
    assert response.json()["message"]["visibility_mask"] == 0


def test_v2_automation_thread_messages_get_automation_masks(people, django_capture_on_commit_callbacks):
    # given: a REST thread in automation mode (the API creates these; the automation channel's are refused)
    thread = ThreadFactory(bot=people["bot"], runtime_mode=Thread.RuntimeMode.AUTOMATION, channel=Thread.Channel.REST)
    client = token_client(people["owner"])
    # when
    with django_capture_on_commit_callbacks(execute=True):
        client.post(messages_url(thread), {"content": "daily report"}, format="json")
    # then: the prompt is invisible (0), the reply is history-only (1); context stays empty
    masks = list(Message.objects.filter(thread=thread).order_by("id").values_list("kind", "visibility_mask"))
    assert masks == [("user_message", 0), ("agent_reply", 1)]
    assert client.get(f"/api/v1/threads/{thread.pk}/context/").json()["results"] == []
    history = client.get(f"/api/v1/threads/{thread.pk}/history/").json()["results"]
    assert [m["kind"] for m in history] == ["agent_reply"]


def test_v2_chat_rest_messages_get_chat_masks_and_feed_the_next_turns_context(
    people, django_capture_on_commit_callbacks
):
    # given
    thread = ThreadFactory(bot=people["bot"])
    client = token_client(people["owner"])
    # when: two messages in a row
    with django_capture_on_commit_callbacks(execute=True):
        client.post(messages_url(thread), {"content": "one"}, format="json")
    with django_capture_on_commit_callbacks(execute=True):
        client.post(messages_url(thread), {"content": "two"}, format="json")
    # then
    rows = list(Message.objects.filter(thread=thread).order_by("id").values_list("kind", "visibility_mask", "content"))
    assert rows == [
        ("user_message", 3, "one"),
        ("agent_reply", 3, f"{ECHO_LABEL} I received 0 context messages; you said: one"),
        ("user_message", 3, "two"),
        ("agent_reply", 3, f"{ECHO_LABEL} I received 2 context messages; you said: two"),
    ]


def test_t2_a_lost_enqueue_still_answers_202_and_the_sweeper_runs_the_turn(
    people, mocker, django_capture_on_commit_callbacks
):
    # given: the broker is down when the message is posted
    from datetime import timedelta

    from django.utils import timezone
    from kombu.exceptions import OperationalError

    from agents.services.turns import turns_sweep
    from agents.tasks import turn_run_task

    thread = ThreadFactory(bot=people["bot"])
    real_delay = turn_run_task.apply_async
    delay = mocker.patch.object(turn_run_task, "apply_async", side_effect=OperationalError("Error 111 connecting"))
    with django_capture_on_commit_callbacks(execute=True):
        response = token_client(people["owner"]).post(messages_url(thread), {"content": "hi"}, format="json")
    assert response.status_code == 202
    turn = Turn.objects.get()
    assert (turn.status, turn.attempts, delay.call_count) == (Turn.Status.QUEUED, 0, 1)
    # when: the broker is back and the sweeper runs a minute later (a fresh turn is left alone)
    delay.side_effect = real_delay
    assert turns_sweep() == 0
    Turn.objects.update(queued_at=timezone.now() - timedelta(seconds=61))
    swept = turns_sweep()
    # then
    turn.refresh_from_db()
    assert swept == 1
    assert turn.status == Turn.Status.DELIVERED
    assert Message.objects.filter(kind=Message.Kind.AGENT_REPLY).count() == 1


# --- issue 9.11: REST posts only into live REST threads ---------------------------------------------------


@pytest.mark.parametrize(
    ("thread_fields", "expected_message"),
    [
        (
            {"channel": Thread.Channel.FEISHU, "external_key": "oc_group:om_root"},
            "This thread belongs to a Feishu chat; post in Feishu instead.",
        ),
        (
            {"runtime_mode": Thread.RuntimeMode.AUTOMATION, "channel": Thread.Channel.AUTOMATION},
            "This thread belongs to the Automation channel; only REST threads take REST messages.",
        ),
        ({"retired_at": "2026-01-01T00:00:00Z"}, "This thread is retired; start a new thread to post."),
    ],
    ids=["feishu", "automation", "retired"],
)
def test_i9_11_rest_cannot_post_into_feishu_automation_or_retired_threads_and_writes_nothing(
    people, thread_fields, expected_message, django_capture_on_commit_callbacks
):
    # given
    thread = ThreadFactory(bot=people["bot"], **thread_fields)
    # when
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = token_client(people["owner"]).post(messages_url(thread), {"content": "hi"}, format="json")
    # then
    assert response.status_code == 409
    assert response.json() == {
        "message": expected_message,
        "extra": {"thread_id": thread.pk, "channel": thread.channel},
    }
    assert (Message.objects.count(), Turn.objects.count(), len(callbacks)) == (0, 0, 0)


def test_i9_11_a_retired_thread_of_another_user_is_still_a_404(people):
    # given: the ownership check comes first, so a non-owner learns nothing about the thread's state
    thread = ThreadFactory(bot=people["bot"], retired_at="2026-01-01T00:00:00Z")
    # when
    response = token_client(people["other"]).post(messages_url(thread), {"content": "hi"}, format="json")
    # then
    assert response.status_code == 404
    assert Message.objects.count() == 0
