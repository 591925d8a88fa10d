"""P11: the Bot change page's probe fields, the judgement admin, the failing-closed list, the explain selector.

The seed's front end had five cases for its probe-model picker filter (discuss-probe-models.test.ts); here the
picker is the admin's model select (limit_choices_to) and its autocomplete, so the five cases are admin cases.
"""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot, Provider
from feishu.admin import explain_in_words
from feishu.explain import ExplainNotFound, wake_explain_data
from feishu.models import DiscussWake
from probe.models import ProbeJudgement
from probe.selectors import gate_config_get
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory
from tests.agents.forms import bot_admin_form_data

pytestmark = pytest.mark.django_db


def picker_ids(admin_client, bot: Bot) -> set[int]:
    """What the Bot page's probe-model select offers: its autocomplete answer (the widget the page uses)."""
    response = admin_client.get(
        reverse("admin:autocomplete"),
        {"app_label": "agents", "model_name": "bot", "field_name": "discuss_probe_model", "term": ""},
    )
    assert response.status_code == 200
    return {int(result["id"]) for result in response.json()["results"]}


def test_picker_keeps_tool_calling_models_of_enabled_providers_P11(admin_client):
    """Case 1: keeps tool-calling models from enabled providers."""
    judge = LLMModelFactory(supports_tool_calls=True)
    bot = BotFactory()
    assert judge.pk in picker_ids(admin_client, bot)
    response = admin_client.post(
        reverse("admin:agents_bot_change", args=[bot.pk]),
        bot_admin_form_data(bot, discuss_probe_mode="model", discuss_probe_model=judge.pk),
    )
    assert response.status_code == 302
    bot.refresh_from_db()
    assert (bot.discuss_probe_mode, bot.discuss_probe_model_id) == ("model", judge.pk)


def test_picker_drops_models_without_tool_calling_P11(admin_client):
    """Case 2: a vision-only model is dropped, and posting it anyway is refused."""
    vision_only = LLMModelFactory(supports_tool_calls=False, supports_vision=True)
    bot = BotFactory()
    assert vision_only.pk not in picker_ids(admin_client, bot)
    response = admin_client.post(
        reverse("admin:agents_bot_change", args=[bot.pk]),
        bot_admin_form_data(bot, discuss_probe_mode="model", discuss_probe_model=vision_only.pk),
    )
    assert response.status_code == 200
    assert "discuss_probe_model" in response.context["adminform"].form.errors
    bot.refresh_from_db()
    assert (bot.discuss_probe_mode, bot.discuss_probe_model_id) == ("inherit", None)


def test_picker_drops_models_with_no_declared_capabilities_P11(admin_client):
    """Case 3: a model created with no capability flags (the defaults) is dropped."""
    undeclared = LLMModelFactory()
    assert undeclared.pk not in picker_ids(admin_client, BotFactory())


def test_picker_drops_disabled_models_and_models_of_disabled_providers_P11(admin_client):
    """Case 4."""
    disabled_model = LLMModelFactory(supports_tool_calls=True, is_enabled=False)
    of_disabled_provider = LLMModelFactory(supports_tool_calls=True, provider=ProviderFactory(is_enabled=False))
    offered = picker_ids(admin_client, BotFactory())
    assert disabled_model.pk not in offered
    assert of_disabled_provider.pk not in offered


def test_picker_drops_models_whose_provider_is_unknown_P11(admin_client):
    """Case 5: a provider kind without an adapter is unknown (a model without a provider cannot exist)."""
    unknown = LLMModelFactory(supports_tool_calls=True, provider=ProviderFactory(kind="carrier_pigeon"))
    known = LLMModelFactory(supports_tool_calls=True, provider=ProviderFactory(kind=Provider.Kind.GEMINI))
    offered = picker_ids(admin_client, BotFactory())
    assert unknown.pk not in offered
    assert known.pk in offered


def test_model_mode_without_a_model_is_a_validation_error_P11(admin_client):
    bot = BotFactory()
    # the model rule itself
    bot.discuss_probe_mode = Bot.ProbeMode.MODEL
    with pytest.raises(ValidationError) as error:
        bot.full_clean()
    assert "discuss_probe_model" in error.value.message_dict
    # and on the admin page
    bot.refresh_from_db()
    response = admin_client.post(
        reverse("admin:agents_bot_change", args=[bot.pk]), bot_admin_form_data(bot, discuss_probe_mode="model")
    )
    assert response.status_code == 200
    assert "discuss_probe_model" in response.context["adminform"].form.errors
    assert Bot.objects.get(pk=bot.pk).discuss_probe_mode == "inherit"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("probe_debounce_initial_ms", "-1"),
        ("probe_debounce_initial_ms", "600001"),
        ("probe_debounce_max_ms", "86400000"),
    ],
)
def test_debounce_delays_out_of_bounds_are_refused_P10_P11(admin_client, field, value):
    bot = BotFactory()
    response = admin_client.post(
        reverse("admin:agents_bot_change", args=[bot.pk]), bot_admin_form_data(bot, **{field: value})
    )
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == [field]
    bot.refresh_from_db()
    assert (bot.probe_debounce_initial_ms, bot.probe_debounce_max_ms) == (None, None)


def test_debounce_delays_within_bounds_are_saved_P10_P11(admin_client):
    bot = BotFactory()
    data = bot_admin_form_data(bot, probe_debounce_initial_ms="2000", probe_debounce_max_ms="600000")
    response = admin_client.post(reverse("admin:agents_bot_change", args=[bot.pk]), data)
    assert response.status_code == 302
    bot.refresh_from_db()
    assert (bot.probe_debounce_initial_ms, bot.probe_debounce_max_ms) == (2000, 600000)


def test_clearing_the_model_returns_to_inherit_and_reaches_the_gate_P11_P3(admin_client):
    # given a bot judging with its own model, its gate configuration cached
    judge = LLMModelFactory(supports_tool_calls=True)
    bot = BotFactory(discuss_probe_mode=Bot.ProbeMode.MODEL, discuss_probe_model=judge)
    assert gate_config_get(bot=bot).model == judge
    # when the operator clears the model on the change page
    response = admin_client.post(
        reverse("admin:agents_bot_change", args=[bot.pk]),
        bot_admin_form_data(bot, discuss_probe_mode="model", discuss_probe_model=""),
    )
    # then: inherit, and the next wake sees it (the save bumped the cache key)
    assert response.status_code == 302
    saved = Bot.objects.get(pk=bot.pk)
    assert (saved.discuss_probe_mode, saved.discuss_probe_model_id) == ("inherit", None)
    assert gate_config_get(bot=saved).cause == "not_configured"


# --- Judgements and the failing-closed list (P10, P11) -------------------------------------------------------


def judgement(bot: Bot, **fields) -> ProbeJudgement:
    defaults = {"gate_ran": True, "cause": "judged", "outcome": "no_action", "activated": False}
    return ProbeJudgement.objects.create(bot=bot, **{**defaults, **fields})


def test_judgement_changelist_lists_the_gate_columns_P11(admin_client):
    bot = BotFactory(name="Planner")
    judgement(bot, input_tokens=120, output_tokens=9, duration_ms=340, reason="chatter")
    response = admin_client.get(reverse("admin:probe_probejudgement_changelist"))
    assert response.status_code == 200
    content = response.content.decode()
    for expected in ("Planner", "judged", "no_action", "120 + 9", "340", "Bots failing closed (24 h)"):
        assert expected in content
    assert admin_client.get(reverse("admin:probe_probejudgement_add")).status_code == 403


def test_failing_closed_view_shows_cause_and_count_over_24_hours_P10_P11(admin_client):
    # given
    muted, healthy = BotFactory(name="Muted"), BotFactory(name="Healthy")
    for _ in range(3):
        judgement(muted, cause="model_call_failed", outcome="error")
    judgement(muted, cause="judged", outcome="malformed")
    judgement(healthy, cause="judged", outcome="act", activated=True)
    judgement(healthy, gate_ran=False, cause="inherited_model_cannot_call_tools", outcome="disabled")
    old = judgement(healthy, cause="model_call_failed", outcome="error")
    ProbeJudgement.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=25))
    # when
    response = admin_client.get(reverse("admin:probe_probejudgement_failing"))
    # then
    assert response.status_code == 200
    rows = [(entry["row"].bot_name, entry["row"].cause, entry["row"].count) for entry in response.context["rows"]]
    assert rows == [("Muted", "model_call_failed", 3), ("Muted", "judged", 1)]
    assert "Healthy" not in response.content.decode()


def test_judgements_older_than_30_days_are_pruned():
    from probe.tasks import judgements_prune_task

    bot = BotFactory()
    kept, pruned = judgement(bot), judgement(bot)
    ProbeJudgement.objects.filter(pk=pruned.pk).update(created_at=timezone.now() - timedelta(days=31))
    assert judgements_prune_task() == 1
    assert list(ProbeJudgement.objects.values_list("pk", flat=True)) == [kept.pk]


# --- The explain selector and page (the bridge's one screen) -------------------------------------------------


def test_wake_explain_shows_gate_and_no_turn_for_a_declined_wake_P11(rf, admin_user):
    bot = BotFactory(name="Planner")
    now = timezone.now()
    wake = DiscussWake.objects.create(
        bot=bot,
        chat_id="oc_1",
        root_msg_id="om_r",
        status="done",
        message_ids=["om_1", "om_2"],
        last_message_id="om_2",
        first_message_at=now,
        due_at=now,
        deadline_at=now,
    )
    judgement(bot, wake_id=wake.pk, reason="chatter between others", input_tokens=80, output_tokens=12)
    # when
    data = wake_explain_data(wake_id=wake.pk)
    # then
    assert data["wake"]["message_ids"] == ["om_1", "om_2"]
    assert [(g["ran"], g["cause"], g["outcome"], g["reason"]) for g in data["gate"]] == [
        (True, "judged", "no_action", "chatter between others")
    ]
    assert (data["turn"], data["context"], data["delivery"]) == (None, None, [])
    request = rf.get("/")
    request.user = admin_user
    context = {"explain": data, **explain_in_words(data)}  # what the admin view gives the template
    html = render_to_string("admin/feishu/wake_explain.html", context, request=request)
    assert "chatter between others" in html and "No turn: the gate kept the bot silent." in html


def test_explain_of_an_unknown_wake_is_a_clear_error():
    with pytest.raises(ExplainNotFound):
        wake_explain_data(wake_id=999)


def test_g2_a_misconfigured_bot_is_listed_with_its_cause_never_silently_muted(admin_client):
    # given: a discuss bot whose model's provider is disabled and which has no Feishu app, and a healthy bot
    broken = BotFactory(name="Broken", group_reply_mode=Bot.GroupReplyMode.DISCUSS, discuss_probe_mode="off")
    Provider.objects.filter(pk=broken.primary_model.provider_id).update(is_enabled=False)
    BotFactory(name="Healthy")
    # when
    response = admin_client.get(reverse("admin:probe_probejudgement_failing"))
    # then
    assert response.status_code == 200
    rows = [(entry["row"].bot_name, entry["row"].cause) for entry in response.context["misconfigured"]]
    assert rows == [
        ("Broken", f"the provider of its model {broken.primary_model} is disabled"),
        ("Broken", "it is in discuss mode but has no Feishu app: it hears no group"),
    ]
    assert "it hears no group" in response.content.decode()


def test_g5_saving_a_workspace_in_the_admin_drops_its_cached_policy(admin_client):
    from threadcontext.models import Workspace
    from threadcontext.selectors import workspace_cached_get

    # given: a cached workspace
    workspace = Workspace.objects.create(bot_profile="planner", chat_id="oc_1")
    assert workspace_cached_get(bot_profile="planner", chat_id="oc_1").reply_mode == ""
    # when: the operator sets the reply mode to off
    data = {
        "bot_profile": "planner", "chat_id": "oc_1", "name": "", "mode": "shared", "owner_open_id": "",
        "thread_context_limit": 20, "reply_mode": "off", "allowed_open_ids": '["ou_lead"]',
        "session_scope": "topic", "bot_chain_limit": 6, "discuss_answers": "one", "topic_root_enabled": "unknown", "shared_thread_enabled": "unknown",
    }  # fmt: skip
    response = admin_client.post(reverse("admin:threadcontext_workspace_change", args=[workspace.pk]), data)
    # then
    assert response.status_code == 302
    cached = workspace_cached_get(bot_profile="planner", chat_id="oc_1")
    assert (cached.reply_mode, cached.allowed_open_ids) == ("off", ["ou_lead"])


def test_a9_open_id_lists_are_edited_one_per_line_not_as_json(admin_client):
    from threadcontext.models import Workspace

    # given: a workspace that allows two people
    workspace = Workspace.objects.create(bot_profile="planner", chat_id="oc_2", allowed_open_ids=["ou_a", "ou_b"])
    url = reverse("admin:threadcontext_workspace_change", args=[workspace.pk])
    # when the operator opens its page: one id per line, no brackets or quotes
    page = admin_client.get(url).content.decode()
    assert "\nou_a\nou_b</textarea>" in page and "[&quot;ou_a&quot;" not in page
    # when: they type ids one per line (and with a comma), and clear the command list
    data = {
        "bot_profile": "planner", "chat_id": "oc_2", "name": "", "mode": "shared", "owner_open_id": "",
        "thread_context_limit": 20, "reply_mode": "", "allowed_open_ids": "ou_a\r\nou_c, ou_d\r\n",
        "command_open_ids": "", "session_scope": "topic", "bot_chain_limit": 6, "discuss_answers": "one",
        "topic_root_enabled": "unknown", "shared_thread_enabled": "unknown",
    }  # fmt: skip
    response = admin_client.post(url, data)
    # then the lists are stored as lists
    assert response.status_code == 302
    workspace.refresh_from_db()
    assert (workspace.allowed_open_ids, workspace.command_open_ids) == (["ou_a", "ou_c", "ou_d"], [])
