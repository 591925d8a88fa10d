"""Explain in people's words (issue 14 item 4): causes and exclusions as sentences with their code in small
print, dicts as tables, "(none)" rows, the model input shown once, masks as words, and the probe mode and model
of each judgement as they were when the gate ran."""

import re
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot, Message, Turn
from feishu.discuss.wake import ABSORBED_ERROR
from feishu.models import DiscussWake
from probe.admin import CAUSE_SENTENCES
from probe.models import ProbeJudgement
from probe.rules import Cause
from tests.admin.test_links import CHAT, answered_wake  # noqa: F401  (fixtures)
from tests.agents.factories import BotFactory
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401  (fixtures)
from tests.probe.conftest import stub_base_url
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.admin import THREAD_CONTEXT_OFF_SENTENCE
from threadcontext.models import ThreadContextDecision, Workspace

pytestmark = pytest.mark.django_db


def test_a_judgement_records_the_probe_mode_and_model_in_force_and_the_explain_page_shows_them(
    admin_client,
    answered_wake,  # noqa: F811
):
    # given: the judgement of a wake judged by the bot's own probe model
    wake = answered_wake
    judgement = ProbeJudgement.objects.get(wake_id=wake.pk)
    judge = wake.bot.discuss_probe_model
    assert (judgement.probe_mode, judgement.probe_model_name) == ("model", f"{judge.provider.name} / {judge.name}")

    # when: the operator later turns the gate off and renames the judge
    Bot.objects.filter(pk=wake.bot_id).update(discuss_probe_mode=Bot.ProbeMode.OFF)
    type(judge).objects.filter(pk=judge.pk).update(name="renamed-judge")
    page = admin_client.get(reverse("admin:feishu_discusswake_explain", args=[wake.pk])).content.decode()

    # then: the explain page shows what ran, in words, with the codes in small print
    at_the_time = unescape(re.search(r'class="probe-at-the-time">(.*?)</td>', page, re.S).group(1))
    assert "model (the bot's probe model)" in at_the_time
    assert '<small class="code"><code>model</code></small>' in at_the_time
    assert f"{judge.provider.name} / {judge.name}" in at_the_time
    assert "renamed-judge" not in at_the_time
    cause = unescape(re.search(r'class="cause">(.*?)</td>', page, re.S).group(1))
    assert cause == f'{CAUSE_SENTENCES[Cause.JUDGED]} <small class="code"><code>judged</code></small>'


def test_a_shared_thread_context_switched_off_is_the_sentence_of_every_exclusion(
    feishu,  # noqa: F811
    make_feishu_bot,  # noqa: F811
    llm_stub,
    admin_client,
    django_capture_on_commit_callbacks,
):
    # given: a workspace whose shared thread context is off, one earlier message, then an @ of the bot
    from tests.agents.factories import LLMModelFactory, ProviderFactory

    provider = ProviderFactory(kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), max_retries=0)
    bot = make_feishu_bot(primary_model=LLMModelFactory(provider=provider, name="gpt-4o"))
    Workspace.objects.create(bot_profile=bot.slug, chat_id=CHAT, shared_thread_enabled=False)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Here is the plan.")))
    with django_capture_on_commit_callbacks(execute=True):
        feishu.say(bot, text="the release is on friday", chat_id=CHAT)
        feishu.say(bot, text="what is the plan?", chat_id=CHAT, mention=[bot])
    decision = ThreadContextDecision.objects.get(bot_profile=bot.slug)
    assert {item["reason"] for item in decision.excluded} == {"not_in_mode"}

    # when
    page = admin_client.get(reverse("admin:threadcontext_threadcontextdecision_explain", args=[decision.pk]))
    html = page.content.decode()

    # then: the cause is a sentence, the code in small print; dicts are tables; an empty table has a "(none)" row
    whys = [unescape(why) for why in re.findall(r'<td class="why">(.*?)</td>', html, re.S)]
    assert whys and all(
        why == f'{THREAD_CONTEXT_OFF_SENTENCE} <small class="code"><code>not_in_mode</code></small>' for why in whys
    )
    selected = re.search(r'id="selected-items">(.*?)</table>', html, re.S).group(1)
    assert '<tr class="none"><td colspan="5">(none)</td></tr>' in selected
    diagnostics = re.search(r'id="diagnostics">(.*?)</div>', html, re.S).group(1)
    assert "<th>excluded_by_reason</th><td><table" in diagnostics
    assert "{'not_in_mode'" not in html  # no Python dict printed as text


def test_the_turn_page_shows_the_model_input_once_usage_as_a_table_and_masks_as_words(
    feishu,  # noqa: F811
    make_feishu_bot,  # noqa: F811
    llm_stub,
    admin_client,
    django_capture_on_commit_callbacks,
):
    # given: an @ of the bot (the runner stores its messages twice: neutral and in the request as sent)
    from tests.agents.factories import LLMModelFactory, ProviderFactory

    provider = ProviderFactory(kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), max_retries=0)
    bot = make_feishu_bot(primary_model=LLMModelFactory(provider=provider, name="gpt-4o"))
    Workspace.objects.create(bot_profile=bot.slug, chat_id=CHAT)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Here is the plan.")))
    with django_capture_on_commit_callbacks(execute=True):
        feishu.say(bot, text="what is the plan?", chat_id=CHAT, mention=[bot])
    turn = Turn.objects.get(bot=bot)
    assert turn.model_input["messages"] == turn.model_input["request"]["messages"]

    # when
    page = admin_client.get(reverse("admin:agents_turn_change", args=[turn.pk])).content.decode()
    message_page = admin_client.get(reverse("admin:agents_message_change", args=[turn.user_message_id]))

    # then: the question is printed once as the person wrote it and once in the model input, folded; the rest of
    # the model input and the usage are tables
    assert page.count("what is the plan?") == 2
    model_input = re.search(r'field-model_input_view">(.*?)</details>', page, re.S).group(1)
    assert model_input.count("what is the plan?") == 1
    assert "<th>context_budget_tokens</th>" in model_input
    usage = re.search(r'field-usage_view">.*?<div class="readonly">(.*?)</div>', page, re.S).group(1)
    assert usage.startswith('<table class="dict-table">')  # key order is the database's (jsonb sorts keys)
    assert (
        f'<th>input tokens <small class="quiet">input_tokens</small></th><td>{turn.usage["input_tokens"]}</td>' in usage
    )
    # and the mask says who sees the message
    assert Message.objects.get(pk=turn.user_message_id).visibility_mask == 3
    assert 'history + context <small class="code"><code>3</code></small>' in message_page.content.decode()


def test_a_wake_absorbed_by_an_at_is_an_outcome_not_an_error(admin_client):
    """Issue 27: a wake an @ answered instead was listed under "Error"."""
    now = timezone.now()
    wake = DiscussWake.objects.create(
        bot=BotFactory(),
        chat_id="oc_1",
        root_msg_id="om_root",
        status=DiscussWake.Status.DONE,
        last_message_id="om_1",
        first_message_at=now,
        due_at=now,
        deadline_at=now,
        error=f"{ABSORBED_ERROR} 7",
    )

    page = admin_client.get(reverse("admin:feishu_discusswake_explain", args=[wake.pk])).content.decode()

    assert f"<th>Outcome</th><td data-wake-note>{ABSORBED_ERROR} 7</td>" in page


def test_a_wakes_messages_and_the_excluded_items_show_their_text(admin_client, answered_wake):  # noqa: F811
    """Issue 27, left: the wake's messages were bare om_ ids and the explain page's excluded items had no text."""
    wake = answered_wake
    (message_id,) = wake.message_ids
    decision = ThreadContextDecision.objects.get(pk=wake.turn.context_decision_id)
    assert [(item["reason"], item["preview"]) for item in decision.excluded] == [
        ("not_in_mode", "why is the build red?")
    ]

    explain = admin_client.get(reverse("admin:feishu_discusswake_explain", args=[wake.pk])).content.decode()
    change = admin_client.get(reverse("admin:feishu_discusswake_change", args=[wake.pk])).content.decode()

    # the wake's message as who said what, its id in small print, on the explain page and the wake's own page
    listed = re.search(r'id="explain-wake-messages">(.*?)</ol>', explain, re.S).group(1)
    assert f'why is the build red? <small class="amux-code">{message_id}</small>' in listed
    own = re.search(r'field-messages_listed">.*?<div class="readonly">(.*?)</div>', change, re.S).group(1)
    assert f'why is the build red? <small class="amux-code">{message_id}</small>' in own
    assert "[&quot;om_" not in change  # no bare JSON list of ids
    # the excluded item with its text beside the reason
    excluded = re.search(r'id="explain-excluded">(.*?)</table>', explain, re.S).group(1)
    assert '<td class="preview">why is the build red?</td>' in excluded
