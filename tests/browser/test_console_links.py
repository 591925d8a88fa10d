"""The console answers its three questions by clicking (issue 14): which bot is unhealthy (the dashboard shows a
bot failing closed after a scripted provider failure, its number leads to the judgements), why it said that
(wake → turn → context decision → deliveries by links), in the operator's language (explain pages in zh-hans and
ja). The console fixture fails any test whose pages logged a console error."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.models import DiscussWake, OutboundDelivery
from probe.models import ProbeJudgement
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.browser.conftest import ADMIN_PASSWORD, VIEWPORT
from tests.browser.test_console import console_data  # noqa: F401  (fixture)
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401  (fixtures)
from tests.probe.conftest import make_judge, stub_base_url  # noqa: F401  (fixtures)
from tests.stubs.llm_servers import AUTH_BODIES, StubResponse

FAILING_CHAT = "oc_support_group_chat"


@pytest.fixture
def failing_bot(transactional_db, feishu, make_feishu_bot, make_judge, llm_stub):  # noqa: F811
    """A discuss bot whose judge's provider refuses its key: the wake is judged, fails closed, the bot is silent."""
    provider = ProviderFactory(kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), max_retries=0)
    bot = make_feishu_bot(
        slug="support-bot",
        name="Support desk",
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o"),
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )
    llm_stub.enqueue("anthropic", StubResponse(status=401, body=AUTH_BODIES["anthropic"]))
    feishu.say(bot, text="is the VPN down for everyone?", chat_id=FAILING_CHAT)
    discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    return bot


def test_the_dashboard_shows_a_bot_failing_closed_and_its_number_leads_to_the_judgements(
    console_page, operator, failing_bot
):
    # given
    judgement = ProbeJudgement.objects.get(bot=failing_bot)
    assert (judgement.cause, judgement.outcome) == ("model_call_failed", "error")
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)
    page = console_page.page

    # when: the operator looks at the front page
    row = page.locator(f'tr.bot-row[data-bot="{failing_bot.slug}"]')

    # then: the bot's health says failing closed, in words
    assert row.get_attribute("data-health") == "failing_closed"
    assert "failing closed" in row.locator(".health").inner_text()
    console_page.screenshot("dashboard-failing-closed")

    # when: the operator clicks the silence number of that bot
    with page.expect_navigation():
        row.locator('a[data-number="silence_error"]').click()

    # then: the judgement list of that bot, showing that one judgement
    assert page.locator("#result_list tbody tr").count() == 1
    assert page.locator("#result_list tbody tr").first.inner_text().count("model_call_failed") == 1
    console_page.screenshot("dashboard-failing-closed-judgements")

    # and the judgement's page says why, in words, with the code in small print
    with page.expect_navigation():
        page.locator("#result_list tbody tr th a").first.click()
    cause = page.locator(".field-cause_in_words .readonly")
    assert "The call to the probe model failed" in cause.inner_text()
    assert cause.locator("small.code code").inner_text() == "model_call_failed"
    console_page.screenshot("judgement-failing-closed")


def test_wake_turn_decision_and_deliveries_are_reached_by_links(console_page, operator, console_data):  # noqa: F811
    # given
    wake = DiscussWake.objects.get(bot=console_data)
    delivery = OutboundDelivery.objects.filter(turn_id=wake.turn_id).order_by("chunk_index").first()
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)
    page = console_page.page

    # when: from the wake list, its explain link
    console_page.open(reverse("admin:feishu_discusswake_changelist"))
    with page.expect_navigation():
        page.locator(f'#result_list a[href="{reverse("admin:feishu_discusswake_explain", args=[wake.pk])}"]').click()
    console_page.screenshot("links-1-wake-explain")
    # then the wake's turn
    with page.expect_navigation():
        page.locator("#explain-related a", has_text="turn").first.click()
    assert page.url.endswith(reverse("admin:agents_turn_change", args=[wake.turn_id]))
    console_page.screenshot("links-2-turn")
    # then the turn's context decision
    with page.expect_navigation():
        page.locator(".field-related a", has_text="context decision").click()
    assert "/admin/threadcontext/threadcontextdecision/" in page.url and page.url.endswith("/explain/")
    console_page.screenshot("links-3-decision")
    # and back to the turn by the decision's own link, then its deliveries
    with page.expect_navigation():
        page.locator("#decision-related a", has_text="the turn that used it").click()
    with page.expect_navigation():
        page.locator("#result_list tbody tr th a").first.click()
    with page.expect_navigation():
        page.locator(".field-related a", has_text="deliveries").click()
    console_page.screenshot("links-4-deliveries")

    # then: the delivery list of that turn, and nothing of it beyond the viewport
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == OutboundDelivery.objects.filter(turn_id=wake.turn_id).count()
    assert str(delivery.pk) in rows.first.inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]


@pytest.mark.parametrize(
    ("language", "gate_heading", "why"),
    [("zh-hans", "闸门", "探测模型已判断本次唤醒"), ("ja", "ゲート", "プローブモデルが起動を判定しました")],
)
def test_the_explain_pages_speak_chinese_and_japanese(
    console_page,
    operator,
    console_data,  # noqa: F811
    language,
    gate_heading,
    why,
):
    # given
    wake = DiscussWake.objects.get(bot=console_data)
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)
    with console_page.page.expect_navigation():
        console_page.page.select_option("#language-select", language)

    # when
    console_page.open(reverse("admin:feishu_discusswake_explain", args=[wake.pk]))

    # then
    page = console_page.page
    assert gate_heading in page.locator("#wake-explain").inner_text()
    assert why in page.locator("#explain-gate td.cause").first.inner_text()
    console_page.screenshot(f"wake-explain-{language}")
    console_page.open(reverse("admin:agents_turn_change", args=[wake.turn_id]))
    labels = page.locator(".form-row label").all_inner_texts()
    assert any({"zh-hans": "来源消息 ID", "ja": "元メッセージ ID"}[language] in label for label in labels)
    console_page.screenshot(f"turn-{language}")
