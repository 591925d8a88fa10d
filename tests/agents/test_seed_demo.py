"""seed_demo (idempotent demo data whose /history and /context differ) and ensure_admin."""

import io

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.test import RequestFactory
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Bot, LLMModel, Message, Provider, Thread, UserProfile
from tests.agents.factories import staff_user
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db


def _counts() -> dict[str, int]:
    models = [Provider, LLMModel, UserProfile, Bot, Thread, Message, Workspace, get_user_model()]
    return {model.__name__: model.objects.count() for model in models}


def _seed() -> str:
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def test_seed_demo_creates_the_demo_and_a_second_run_changes_nothing():
    # when
    first_output = _seed()
    after_first = _counts()
    snapshot = list(Message.objects.order_by("id").values_list("id", "thread_id", "kind", "visibility_mask", "content"))
    second_output = _seed()

    # then
    assert after_first == {
        "Provider": 1,
        "LLMModel": 2,
        "UserProfile": 1,
        "Bot": 2,
        "Thread": 2,
        "Message": 8,
        "Workspace": 2,
        "User": 1,
    }
    assert _counts() == after_first
    assert list(
        Message.objects.order_by("id").values_list("id", "thread_id", "kind", "visibility_mask", "content")
    ) == (snapshot)
    assert first_output == second_output


def test_seed_demo_rows():
    # when
    _seed()

    # then: an offline provider, a primary and a tool-calling judge, two bots without Feishu secrets
    provider = Provider.objects.get()
    assert (provider.name, provider.kind, provider.api_key) == ("local", "local_rules", "")
    assert sorted(LLMModel.objects.values_list("name", "supports_tool_calls")) == [
        ("local-echo", False),
        ("local-judge", True),
    ]
    bots = {bot.slug: bot for bot in Bot.objects.select_related("owner", "primary_model")}
    assert sorted(bots) == ["coder", "planner"]
    for bot in bots.values():
        assert bot.bridge_id == bot.slug
        assert (bot.feishu_app_secret, bot.feishu_encrypt_key, bot.feishu_verification_token) == ("", "", "")
        assert bot.primary_model.name == "local-echo"
        assert bot.owner.username == "demo"
        assert not bot.owner.has_usable_password()
    assert UserProfile.objects.get().title_model.name == "local-judge"
    assert sorted(Workspace.objects.values_list("bot_profile", "chat_id")) == [
        ("coder", "oc_demo"),
        ("planner", "oc_demo"),
    ]
    # issue 22: the demo bots see each other's answers (the hub's default stays off)
    assert set(Workspace.objects.values_list("shared_thread_enabled", flat=True)) == {True}


def test_seed_demo_threads_have_every_kind_and_history_and_context_differ():
    # given the demo, read through the API by a staff user who may view threads (U6)
    _seed()
    chat = Thread.objects.get(runtime_mode="chat")
    automation = Thread.objects.get(runtime_mode="automation")
    client = APIClient()
    client.force_authenticate(staff_user("ops", "agents.view_thread"))

    def ids(url: str) -> list[tuple[str, int]]:
        return [(m["kind"], m["visibility_mask"]) for m in client.get(url).json()["results"]]

    # when
    chat_history = ids(f"/api/v1/threads/{chat.pk}/history/")
    chat_context = ids(f"/api/v1/threads/{chat.pk}/context/")
    automation_history = ids(f"/api/v1/threads/{automation.pk}/history/")
    automation_context = ids(f"/api/v1/threads/{automation.pk}/context/")

    # then: every kind exists in both threads; the masks are the matrix's (V2, V3)
    assert sorted(set(Message.objects.values_list("thread__runtime_mode", "kind", "visibility_mask"))) == [
        ("automation", "agent_reply", 1),
        ("automation", "user_message", 0),
        ("chat", "agent_reply", 3),
        ("chat", "user_message", 3),
    ]
    assert chat_history == [("agent_reply", 3), ("user_message", 3)] * 2
    assert chat_context == [("user_message", 3), ("agent_reply", 3)] * 2
    assert automation_history == [("agent_reply", 1)] * 2
    assert automation_context == []
    assert (chat.channel, automation.channel) == ("rest", "automation")


def test_seed_demo_keeps_an_operators_edits():
    # given the demo, then an operator renames a bot
    _seed()
    Bot.objects.filter(slug="planner").update(name="Chief planner")

    # when
    _seed()

    # then
    assert Bot.objects.get(slug="planner").name == "Chief planner"


def test_ensure_admin_keeps_the_password_across_runs_and_resets_it_on_request():
    # when: two runs (two `make run`), then a reset
    outputs = []
    for args in ((), (), ("--reset-password",)):
        out = io.StringIO()
        call_command("ensure_admin", *args, stdout=out)
        outputs.append(dict(line.split(": ", 1) for line in out.getvalue().splitlines()))

    # then: one superuser; the second run keeps the first password (no one is logged out, issue 27); the reset
    # prints a new one that replaces it; the token stays, its key printed once (issue 30)
    admin = get_user_model().objects.get()
    assert (admin.username, admin.is_superuser, admin.is_staff) == ("admin", True, True)
    first, reset = outputs[0]["Admin password"], outputs[2]["Admin password"]
    assert outputs[1]["Admin password"].startswith("unchanged")
    assert first != reset and len(reset) >= 20
    login = RequestFactory().post("/admin/login/")  # django-axes' backend needs the request (its address)
    assert authenticate(login, username="admin", password=first) is None
    assert authenticate(login, username="admin", password=reset) == admin
    token = Token.objects.get(user=admin).key
    assert outputs[0]["API token"] == f"{token}  (Authorization: Token {token})"
    assert token not in outputs[1]["API token"] and "not shown again" in outputs[1]["API token"]
