"""The operator console in a real browser (issue 14): log in, every list fits 1440 px with the sidebar open,
the console speaks zh-hans and ja, the API docs load with no CDN, and no page logs a console error."""

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from agents.models import Bot
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.models import DiscussWake
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.browser.conftest import ADMIN_PASSWORD, VIEWPORT
from tests.feishu.conftest import feishu, feishu_stub, make_feishu_bot  # noqa: F401  (fixtures)
from tests.probe.conftest import make_judge, stub_base_url  # noqa: F401  (fixtures)
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body
from threadcontext.models import ThreadContextDecision, Workspace

# The lists issue 14 names, whose last columns were beyond the viewport: they must have rows to be measured.
LISTS_THAT_MUST_HAVE_ROWS = [
    "threadcontext.threadcontextdecision",
    "feishu.discusswake",
    "probe.probejudgement",
    "agents.message",
    "agents.turn",
    "feishu.outbounddelivery",
    "feishu.inboundevent",
]
LONG_QUESTION = (
    "why is the nightly build of the payments service red again since yesterday evening, and who is looking "
    "at the flaky integration test that times out against the sandbox gateway?"
)


@pytest.fixture
def console_data(transactional_db, feishu, make_feishu_bot, make_judge, llm_stub):  # noqa: F811
    """A discuss bot that was woken, judged, answered and delivered, through the real pipeline."""
    provider = ProviderFactory(
        kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), api_key="sk-primary", max_retries=0
    )
    bot = make_feishu_bot(
        slug="planner-bot-with-a-long-slug",
        name="Release planner of the payments team",
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True),
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=make_judge(kind="anthropic"),
        probe_debounce_initial_ms=1000,
    )
    Workspace.objects.create(bot_profile=bot.slug, chat_id="oc_payments_team_group_chat", name="Payments team")
    llm_stub.enqueue(
        "anthropic",
        StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "a question"})])),
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="The sandbox gateway is down. " * 8)))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="I will look at it now. " * 8)))
    feishu.say(bot, text=LONG_QUESTION, chat_id="oc_payments_team_group_chat")
    discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    feishu.say(bot, text=LONG_QUESTION, chat_id="oc_payments_team_group_chat", mention=[bot])
    return bot


def test_an_operator_logs_in_through_the_login_form(console_page, operator):
    # when
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)

    # then
    assert console_page.page.locator("#site-name a").inner_text() == "amuxweb console"
    console_page.screenshot("index-en")


def test_every_admin_changelist_fits_1440_px_with_the_sidebar_open(console_page, operator, console_data):
    # given
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)
    overflowing: dict[str, list[str]] = {}
    measured_with_rows: set[str] = set()

    # when: every registered list is opened and each column header's box is measured
    for model in admin.site._registry:
        label = model._meta.label_lower
        console_page.open(reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))
        page = console_page.page
        assert page.locator("#nav-sidebar").is_visible(), label
        console_page.screenshot(f"changelist-{label}")
        headers = page.locator("#result_list thead th")
        if headers.count() == 0:
            continue  # no rows, no table
        measured_with_rows.add(label)
        # The table scrolls inside its own box (left of the filter panel): a column past that box's right edge
        # is as hidden as one past the window's.
        results = page.locator("#changelist .results").bounding_box()
        visible_right = min(VIEWPORT["width"], results["x"] + results["width"])
        for index in range(headers.count()):
            box = headers.nth(index).bounding_box()
            if box["x"] + box["width"] > visible_right + 1:  # +1: sub-pixel rounding of borders
                overflowing.setdefault(label, []).append(headers.nth(index).inner_text().strip() or f"#{index}")
        document_width = page.evaluate("document.documentElement.scrollWidth")
        if document_width > VIEWPORT["width"]:
            overflowing.setdefault(label, []).append(f"page is {document_width} px wide")

    # then
    assert set(LISTS_THAT_MUST_HAVE_ROWS) <= measured_with_rows
    assert overflowing == {}, "columns out of sight: " + repr(overflowing)


def test_explain_pages_and_record_pages_open_without_console_errors(console_page, operator, console_data):
    # given
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)
    wake = DiscussWake.objects.get(bot=console_data)
    decision = ThreadContextDecision.objects.filter(bot_profile=console_data.slug).latest("id")

    # when / then: each page answers 200 (WatchedPage.open) and the fixture fails on any console error
    for name, path in [
        ("wake-explain", reverse("admin:feishu_discusswake_explain", args=[wake.pk])),
        ("turn-explain", reverse("admin:feishu_turn_explain", args=[wake.turn_id])),
        ("decision-explain", reverse("admin:threadcontext_threadcontextdecision_explain", args=[decision.pk])),
        ("turn", reverse("admin:agents_turn_change", args=[wake.turn_id])),
        ("bot", reverse("admin:agents_bot_change", args=[console_data.pk])),
        ("failing-closed", reverse("admin:probe_probejudgement_failing")),
    ]:
        console_page.open(path)
        console_page.screenshot(name)


@pytest.mark.parametrize(
    ("language", "index_heading", "turns_title"),
    [("zh-hans", "站点管理", "轮次"), ("ja", "サイト管理", "ターン")],
)
def test_the_language_switcher_turns_the_console_into_chinese_and_japanese(
    console_page, operator, console_data, language, index_heading, turns_title
):
    # given
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)

    # when: the operator picks the language in the header's switcher (set_language, then back to this page)
    with console_page.page.expect_navigation():
        console_page.page.select_option("#language-select", language)

    # then: Django's own strings and ours are translated
    page = console_page.page
    assert page.locator("html").get_attribute("lang") == language
    assert page.locator("#content h1").inner_text() == index_heading
    assert (
        page.locator("#site-name a").inner_text() == {"zh-hans": "amuxweb 控制台", "ja": "amuxweb コンソール"}[language]
    )
    console_page.screenshot(f"index-{language}")
    console_page.open(reverse("admin:agents_turn_changelist"))
    assert turns_title in page.locator("#content h1").inner_text()
    console_page.screenshot(f"turns-{language}")


def test_swagger_ui_and_redoc_render_without_any_request_beyond_the_hub(console_page, operator):
    # given: every request that leaves the live server is recorded and refused
    outside: list[str] = []
    local_host = urlsplit(console_page.base_url).netloc

    def guard(route):
        if urlsplit(route.request.url).netloc != local_host:
            outside.append(route.request.url)
            return route.abort()
        return route.continue_()

    console_page.page.route("**/*", guard)
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)

    # when
    console_page.open("/api/docs/")
    console_page.page.wait_for_selector(".swagger-ui .info .title")
    console_page.screenshot("api-docs")
    console_page.open("/api/redoc/")
    console_page.page.wait_for_selector("redoc .api-info h1, [class*='api-info'] h1")
    console_page.screenshot("api-redoc")

    # then
    assert outside == []  # no CDN, no font service
