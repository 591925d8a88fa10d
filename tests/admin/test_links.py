"""Everything linked both ways (issue 14 item 2): wake ↔ judgements ↔ turn ↔ context decision ↔ messages ↔
outbound deliveries ↔ inbound event ↔ bot ↔ workspace, on records made by the real pipeline (webhook, wake,
gate through the real Anthropic SDK, turn through the real OpenAI SDK, delivery through lark-oapi)."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot, Turn
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.models import DiscussWake, InboundEvent, OutboundDelivery
from probe.models import ProbeJudgement
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401  (fixtures)
from tests.probe.conftest import stub_base_url
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body
from threadcontext.models import ThreadContextDecision, Workspace

pytestmark = pytest.mark.django_db
CHAT = "oc_release_team"


@pytest.fixture
def answered_wake(feishu, make_feishu_bot, make_judge, llm_stub, django_capture_on_commit_callbacks):  # noqa: F811
    """A discuss wake that was judged "send", answered and delivered."""
    provider = ProviderFactory(
        kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), api_key="sk-primary", max_retries=0
    )
    bot = make_feishu_bot(
        name="Release planner",
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True),
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id=CHAT, name="Release team")
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "a question"})])),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="The gateway is down.")))
    feishu.say(bot, text="why is the build red?", chat_id=CHAT)
    with django_capture_on_commit_callbacks(execute=True):
        discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    return DiscussWake.objects.get(bot=bot)


def related_hrefs(html: str, block_id: str | None = None) -> list[str]:
    """The links of a page's "related" line: the explain pages' block by id, a change page's `related` field."""
    if block_id is not None:
        match = re.search(rf'id="{block_id}">(.*?)</(?:p|div|span)>', html, re.S)
    else:
        match = re.search(r'field-related">.*?<div class="readonly">(.*?)</div>', html, re.S)
    assert match is not None, f"no related block {block_id or 'field-related'}"
    return [unescape(href) for href in re.findall(r'href="([^"]+)"', match.group(1))]


def results_of(client: Client, url: str) -> list:
    """The rows an admin list shows at `url` (its filters applied)."""
    response = client.get(url)
    assert response.status_code == 200, url
    return list(response.context["cl"].result_list)


def test_the_wake_explain_page_links_every_record_it_is_about(admin_client, answered_wake):
    # given
    wake = answered_wake
    turn = Turn.objects.get(pk=wake.turn_id)
    judgement = ProbeJudgement.objects.get(wake_id=wake.pk)
    decision = ThreadContextDecision.objects.get(pk=turn.context_decision_id)
    delivery = OutboundDelivery.objects.get(turn=turn)
    workspace = Workspace.objects.get(bot_profile=wake.bot.slug, chat_id=CHAT)

    # when
    response = admin_client.get(reverse("admin:feishu_discusswake_explain", args=[wake.pk]))
    hrefs = related_hrefs(response.content.decode(), "explain-related")

    # then: each link opens, and the filtered lists hold exactly this wake's records
    assert response.status_code == 200
    assert all(admin_client.get(href).status_code == 200 for href in hrefs), hrefs
    by_path = {href.split("?")[0]: href for href in hrefs}
    assert reverse("admin:agents_bot_change", args=[wake.bot_id]) in by_path
    assert reverse("admin:agents_turn_change", args=[turn.pk]) in by_path
    assert reverse("admin:agents_message_change", args=[turn.user_message_id]) in by_path
    assert reverse("admin:agents_message_change", args=[turn.reply_message_id]) in by_path
    assert reverse("admin:threadcontext_threadcontextdecision_explain", args=[decision.pk]) in by_path
    assert results_of(admin_client, by_path[reverse("admin:probe_probejudgement_changelist")]) == [judgement]
    assert results_of(admin_client, by_path[reverse("admin:feishu_outbounddelivery_changelist")]) == [delivery]
    assert results_of(admin_client, by_path[reverse("admin:threadcontext_workspace_changelist")]) == [workspace]
    inbound = results_of(admin_client, by_path[reverse("admin:feishu_inboundevent_changelist")])
    assert [event.message_id for event in inbound] == wake.message_ids
    # and the breadcrumbs lead back through the bot and its wakes
    breadcrumbs = re.search(r'class="breadcrumbs">(.*?)</div>', response.content.decode(), re.S).group(1)
    assert reverse("admin:agents_bot_change", args=[wake.bot_id]) in breadcrumbs
    assert f"{reverse('admin:feishu_discusswake_changelist')}?bot__id__exact={wake.bot_id}" in unescape(breadcrumbs)


def test_each_record_links_back_to_its_neighbours(admin_client, answered_wake):
    # given
    wake = answered_wake
    turn = Turn.objects.get(pk=wake.turn_id)
    judgement = ProbeJudgement.objects.get(wake_id=wake.pk)
    delivery = OutboundDelivery.objects.get(turn=turn)
    event = InboundEvent.objects.get(message_id=wake.message_ids[0])
    workspace = Workspace.objects.get(bot_profile=wake.bot.slug, chat_id=CHAT)
    wake_explain = reverse("admin:feishu_discusswake_explain", args=[wake.pk])
    turn_page = reverse("admin:agents_turn_change", args=[turn.pk])

    def related(url: str, block_id: str | None = None) -> list[str]:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        hrefs = related_hrefs(response.content.decode(), block_id)
        assert all(admin_client.get(href).status_code == 200 for href in hrefs), hrefs
        return hrefs

    # when / then: the judgement → its wake and turn; the turn → its wake, judgements, decision, deliveries, event
    assert wake_explain in related(reverse("admin:probe_probejudgement_change", args=[judgement.pk]))
    from_turn = related(turn_page)
    assert reverse("admin:threadcontext_threadcontextdecision_explain", args=[turn.context_decision_id]) in from_turn
    lists = {href.split("?")[0]: href for href in from_turn if "?" in href}
    assert results_of(admin_client, lists[reverse("admin:feishu_discusswake_changelist")]) == [wake]
    assert results_of(admin_client, lists[reverse("admin:probe_probejudgement_changelist")]) == [judgement]
    assert results_of(admin_client, lists[reverse("admin:feishu_outbounddelivery_changelist")]) == [delivery]
    # the decision → the turn that used it; the delivery → its turn; the messages → the turns they belong to
    decision_page = reverse("admin:threadcontext_threadcontextdecision_explain", args=[turn.context_decision_id])
    from_decision = related(decision_page, "decision-related")
    turn_list = next(href for href in from_decision if href.startswith(reverse("admin:agents_turn_changelist")))
    assert results_of(admin_client, turn_list) == [turn]
    assert turn_page in related(reverse("admin:feishu_outbounddelivery_change", args=[delivery.pk]))
    for message_id in (turn.user_message_id, turn.reply_message_id):
        from_message = related(reverse("admin:agents_message_change", args=[message_id]))
        turn_lists = [href for href in from_message if href.startswith(reverse("admin:agents_turn_changelist"))]
        assert [results_of(admin_client, href) for href in turn_lists].count([turn]) == 1
    # the inbound event and the workspace → their bot's records; the bot → every list of its records
    assert reverse("admin:agents_bot_change", args=[wake.bot_id]) in related(
        reverse("admin:feishu_inboundevent_change", args=[event.pk])
    )
    from_workspace = related(reverse("admin:threadcontext_workspace_change", args=[workspace.pk]))
    wakes = next(href for href in from_workspace if href.startswith(reverse("admin:feishu_discusswake_changelist")))
    assert results_of(admin_client, wakes) == [wake]
    from_bot = related(reverse("admin:agents_bot_change", args=[wake.bot_id]), "bot-related-links")
    assert len(from_bot) == 9  # issue 26 H3 added its voice transcriptions
    bot_wakes = next(href for href in from_bot if href.startswith(reverse("admin:feishu_discusswake_changelist")))
    assert results_of(admin_client, bot_wakes) == [wake]


def test_every_turn_in_the_list_links_to_its_explain_page(admin_client):
    """Issue 27: why a bot spoke is one click from the turns list."""
    bot = BotFactory()
    thread = ThreadFactory(bot=bot)
    turn = Turn.objects.create(bot=bot, thread=thread, trigger=Turn.Trigger.REST, source_message_id="rest:1")

    page = admin_client.get("/admin/agents/turn/").content.decode()
    explain = reverse("admin:feishu_turn_explain", args=[turn.pk])

    assert f'href="{explain}"' in page
    assert admin_client.get(explain).status_code == 200
