"""The agents admin: every changelist and form renders, secrets are write-only, masks and modes are not editable."""

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import Bot, Provider, Thread
from agents.services.threads import message_create
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory
from tests.agents.forms import bot_admin_form_data

pytestmark = pytest.mark.django_db

PROVIDER_SECRET = "sk-live-provider-secret-0001"
APP_SECRET = "feishu-app-secret-0002"
ENCRYPT_KEY = "feishu-encrypt-key-0003"
VERIFICATION_TOKEN = "feishu-verification-token-0004"
ALL_SECRETS = (PROVIDER_SECRET, APP_SECRET, ENCRYPT_KEY, VERIFICATION_TOKEN)


@pytest.fixture
def bot_with_secrets() -> Bot:
    provider = ProviderFactory(name="openai", kind=Provider.Kind.OPENAI_CHAT, api_key=PROVIDER_SECRET)
    return BotFactory(
        slug="planner",
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o-mini"),
        feishu_app_id="cli_planner",
        feishu_app_secret=APP_SECRET,
        feishu_encrypt_key=ENCRYPT_KEY,
        feishu_verification_token=VERIFICATION_TOKEN,
    )


@pytest.mark.parametrize("model_name", ["provider", "llmmodel", "userprofile", "bot", "thread", "message"])
def test_every_changelist_add_and_change_page_renders_without_a_secret(admin_client, bot_with_secrets, model_name):
    # given one row of every model, secrets set
    thread = ThreadFactory(bot=bot_with_secrets)
    message = message_create(thread=thread, kind="user_message", content="hello")
    from agents.models import UserProfile

    profile = UserProfile.objects.create(user=bot_with_secrets.owner, title_model=bot_with_secrets.primary_model)
    rows = {
        "provider": bot_with_secrets.primary_model.provider,
        "llmmodel": bot_with_secrets.primary_model,
        "userprofile": profile,
        "bot": bot_with_secrets,
        "thread": thread,
        "message": message,
    }

    # when
    changelist = admin_client.get(f"/admin/agents/{model_name}/")
    searched = admin_client.get(f"/admin/agents/{model_name}/?q=planner")
    change = admin_client.get(f"/admin/agents/{model_name}/{rows[model_name].pk}/change/")
    add = admin_client.get(f"/admin/agents/{model_name}/add/")

    # then: pages render (messages are view-only: no add page) and no secret ever reaches the HTML
    assert (changelist.status_code, searched.status_code, change.status_code) == (200, 200, 200)
    assert add.status_code == (403 if model_name == "message" else 200)
    for response in (changelist, searched, change, add):
        for secret in ALL_SECRETS:
            assert secret not in response.content.decode()


def test_lists_show_only_set_or_not_set(admin_client, bot_with_secrets):
    # given a second bot without secrets
    BotFactory(slug="coder", primary_model=bot_with_secrets.primary_model)

    # when
    bots = admin_client.get("/admin/agents/bot/").content.decode()
    providers = admin_client.get("/admin/agents/provider/").content.decode()

    # then: the bot list folds the three Feishu secrets into one column (it must fit 1440 px)
    assert bots.count(">3 of 3 set<") == 1
    assert bots.count(">0 of 3 set<") == 1
    assert providers.count(f">set (ends …{PROVIDER_SECRET[-4:]})<") == 1


def test_blank_secret_keeps_the_stored_value(admin_client, bot_with_secrets):
    # when the form is saved with every secret left blank and another field changed
    response = admin_client.post(
        f"/admin/agents/bot/{bot_with_secrets.pk}/change/", bot_admin_form_data(bot_with_secrets, name="Planner 2")
    )

    # then: the secrets are kept and the admin log records only the field that changed
    assert response.status_code == 302
    bot = Bot.objects.get(pk=bot_with_secrets.pk)
    assert bot.name == "Planner 2"
    assert LogEntry.objects.get().get_change_message() == "Changed Name."
    assert (bot.feishu_app_secret, bot.feishu_encrypt_key, bot.feishu_verification_token) == (
        APP_SECRET,
        ENCRYPT_KEY,
        VERIFICATION_TOKEN,
    )


def test_u2_the_bot_page_sets_who_may_use_the_bot_directly(admin_client, bot_with_secrets):
    # when: the owner's Feishu id and a listed DM policy are saved, the people typed one per line
    data = bot_admin_form_data(
        bot_with_secrets, feishu_owner_open_id=" ou_owner ", dm_policy="listed", dm_open_ids="ou_a\non_b, ou_c"
    )
    response = admin_client.post(f"/admin/agents/bot/{bot_with_secrets.pk}/change/", data)
    # then: stored as the admission check reads them
    assert response.status_code == 302
    bot = Bot.objects.get(pk=bot_with_secrets.pk)
    assert (bot.feishu_owner_open_id, bot.dm_policy, bot.dm_open_ids) == (
        "ou_owner",
        "listed",
        ["ou_a", "on_b", "ou_c"],
    )


def test_a_new_secret_replaces_and_clear_empties(admin_client, bot_with_secrets):
    # when
    response = admin_client.post(
        f"/admin/agents/bot/{bot_with_secrets.pk}/change/",
        bot_admin_form_data(bot_with_secrets, feishu_app_secret="rotated-secret", feishu_encrypt_key_clear="on"),
    )

    # then
    assert response.status_code == 302
    bot = Bot.objects.get(pk=bot_with_secrets.pk)
    assert (bot.feishu_app_secret, bot.feishu_encrypt_key, bot.feishu_verification_token) == (
        "rotated-secret",
        "",
        VERIFICATION_TOKEN,
    )


def test_provider_api_key_is_write_only_and_encrypted_at_rest(admin_client):
    # when a provider is added with a key
    response = admin_client.post(
        "/admin/agents/provider/add/",
        {
            "name": "anthropic",
            "kind": "anthropic",
            "base_url": "",
            "api_key": PROVIDER_SECRET,
            "timeout_seconds": "30",
            "max_retries": "2",
            "is_enabled": "on",
            "models-TOTAL_FORMS": "0",
            "models-INITIAL_FORMS": "0",
        },
    )

    # then: stored encrypted, readable by the app, never rendered back
    assert response.status_code == 302
    provider = Provider.objects.get(name="anthropic")
    assert provider.api_key == PROVIDER_SECRET
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key FROM agents_provider WHERE id = %s", [provider.pk])
        assert PROVIDER_SECRET not in cursor.fetchone()[0]
    page = admin_client.get(f"/admin/agents/provider/{provider.pk}/change/").content.decode()
    assert PROVIDER_SECRET not in page
    assert f"Currently set (ends …{PROVIDER_SECRET[-4:]})." in page


@pytest.mark.parametrize(
    ("timeout_seconds", "max_retries", "field"),
    [("0", "2", "timeout_seconds"), ("-5", "2", "timeout_seconds"), ("nan", "2", "timeout_seconds"),
     ("601", "2", "timeout_seconds"), ("30", "6", "max_retries"), ("30", "-1", "max_retries")],
)  # fmt: skip
def test_provider_timeouts_and_retries_out_of_bounds_are_refused_and_nothing_is_written(
    admin_client, timeout_seconds, max_retries, field
):
    # when
    response = admin_client.post(
        "/admin/agents/provider/add/",
        {
            "name": "broken",
            "kind": "openai_chat",
            "base_url": "",
            "api_key": "",
            "timeout_seconds": timeout_seconds,
            "max_retries": max_retries,
            "is_enabled": "on",
            "models-TOTAL_FORMS": "0",
            "models-INITIAL_FORMS": "0",
        },
    )
    # then
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    assert not Provider.objects.filter(name="broken").exists()


def test_v4_thread_runtime_mode_is_read_only_once_created(admin_client):
    # given
    thread = ThreadFactory(runtime_mode="chat", title="t")

    # when the change form is posted with another runtime mode
    admin_client.post(
        f"/admin/agents/thread/{thread.pk}/change/",
        {"runtime_mode": "automation", "channel": "rest", "title": "renamed", "external_key": ""},
    )

    # then the title changed, the mode did not
    thread.refresh_from_db()
    assert (thread.title, thread.runtime_mode) == ("renamed", "chat")


def test_thread_added_in_the_admin_goes_through_the_service(admin_client):
    bot = BotFactory()

    response = admin_client.post(
        "/admin/agents/thread/add/",
        {"bot": bot.pk, "runtime_mode": "automation", "channel": "automation", "title": "nightly", "external_key": ""},
    )

    assert response.status_code == 302
    assert list(Thread.objects.values_list("bot_id", "runtime_mode", "title")) == [(bot.pk, "automation", "nightly")]


def test_messages_of_one_thread_can_be_listed_and_cannot_be_edited(admin_client):
    # given two threads
    thread = ThreadFactory()
    mine = message_create(thread=thread, kind="agent_reply", content="mine")
    message_create(thread=ThreadFactory(bot=thread.bot), kind="agent_reply", content="other")

    # when
    listed = admin_client.get(f"/admin/agents/message/?thread__id__exact={thread.pk}")
    post = admin_client.post(f"/admin/agents/message/{mine.pk}/change/", {"content": "edited", "visibility_mask": 2})

    # then
    assert listed.status_code == 200
    assert list(listed.context["cl"].result_list) == [mine]
    assert post.status_code == 403
    mine.refresh_from_db()
    assert (mine.content, mine.visibility_mask) == ("mine", 3)


@pytest.mark.parametrize("model_name", ["llmmodel", "userprofile", "bot", "thread", "message", "turn"])
def test_changelists_do_not_run_a_query_per_row(admin_client, model_name):
    # given one row, then many more rows
    def make_rows(count: int) -> None:
        from agents.models import Turn, UserProfile

        for _ in range(count):
            bot = BotFactory()
            UserProfile.objects.create(user=bot.owner, title_model=bot.primary_model)
            thread = ThreadFactory(bot=bot)
            message = message_create(thread=thread, kind="user_message", content="x")
            Turn.objects.create(bot=bot, thread=thread, trigger="rest", source_message_id=f"rest:{message.pk}")

    make_rows(1)
    with CaptureQueriesContext(connection) as one_row:
        assert admin_client.get(f"/admin/agents/{model_name}/").status_code == 200
    make_rows(5)

    # when
    with CaptureQueriesContext(connection) as six_rows:
        assert admin_client.get(f"/admin/agents/{model_name}/").status_code == 200

    # then: list_select_related keeps the count flat (filters listing bots/providers add nothing per row)
    assert len(six_rows) == len(one_row)
