"""Issue 27 in a real browser: the dashboard fits 1440 px in en, zh-hans and ja with words, not codes, and its
cost equals the hand-computed figure; a bot with wrong Feishu credentials shows unhealthy with the reason after
"verify" on its setup page, which warns that http://127.0.0.1 is no address for Feishu. One page load per
language; the screenshots land in var/browser-screenshots/."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from probe.models import ProbeJudgement
from tests.admin.test_dashboard import make_judgement, make_turn
from tests.agents.factories import LLMModelFactory
from tests.browser.conftest import ADMIN_PASSWORD, VIEWPORT
from tests.feishu.conftest import feishu_stub, make_feishu_bot  # noqa: F401  (fixtures)

# Codes the dashboard must show only in small print (.code), never as the words themselves.
CODES = re.compile(
    r"\b(NO_ACTION|MISSING|MALFORMED|ERROR|DISABLED|no_action|failed_closed|feishu_not_\w+|credentials_\w+|"
    r"turns_failing|deliveries_failing|provider_test_failed|connection_down)\b"
)
# By hand: 2 turns x (10 000 in x 3.00 + 2 000 out x 15.00) / 1e6 = 2 x 0.06 = 0.12 USD primary,
# 1 judgement 5 000 in x 0.50 / 1e6 = 0.0025 USD probe; 24 h total 0.1225 USD.
COST_24H = "0.1225 USD"


@pytest.fixture
def busy_bot(transactional_db, make_feishu_bot):  # noqa: F811
    model = LLMModelFactory(name="priced", input_price_per_mtok=Decimal("3.00"), output_price_per_mtok=Decimal("15.00"))
    judge = LLMModelFactory(name="judge", input_price_per_mtok=Decimal("0.50"), output_price_per_mtok=Decimal("1"))
    bot = make_feishu_bot(slug="planner", name="Release planner of the payments team", primary_model=model)
    usage = {"input_tokens": 10000, "output_tokens": 2000, "model": model.name, "provider": model.provider.name}
    for _ in range(2):
        make_turn(bot, age=timedelta(hours=1), usage=usage, duration_ms=1500)
    make_turn(bot, age=timedelta(hours=2), status="failed")
    judgement = make_judgement(bot, age=timedelta(hours=1), outcome=ProbeJudgement.Outcome.NO_ACTION, input_tokens=5000)
    ProbeJudgement.objects.filter(pk=judgement.pk).update(model=judge)
    for outcome in (ProbeJudgement.Outcome.ERROR, ProbeJudgement.Outcome.MALFORMED, ProbeJudgement.Outcome.DISABLED):
        make_judgement(bot, age=timedelta(hours=3), outcome=outcome)
    return bot


def words_outside_small_print(page, selector: str) -> str:
    """The visible text of `selector` without its small print (where the codes belong)."""
    return page.evaluate(
        """(selector) => {
            const copy = document.querySelector(selector).cloneNode(true);
            copy.querySelectorAll("small, .code, .amux-code").forEach((node) => node.remove());
            return copy.innerText;
        }""",
        selector,
    )


def test_the_dashboard_fits_1440_px_in_three_languages_in_words_with_the_cost(console_page, operator, busy_bot):
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)
    page = console_page.page
    for language in ("en", "zh-hans", "ja"):
        page.context.add_cookies([{"name": "django_language", "value": language, "url": console_page.base_url}])
        console_page.open("/admin/")
        assert page.locator("html").get_attribute("lang") == language
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= VIEWPORT["width"], f"{language}: the dashboard is {width} px wide"
        text = words_outside_small_print(page, "#amux-dashboard")
        assert CODES.findall(text) == [], f"{language}: codes shown as words"
        assert page.locator('[data-cost="planner-24h"]').inner_text() == COST_24H
        console_page.screenshot(f"after-dashboard-{language}")


def test_wrong_credentials_show_unhealthy_with_the_reason_after_verify(
    console_page,
    operator,
    make_feishu_bot,  # noqa: F811
    feishu_stub,  # noqa: F811
    settings,
):
    # given: a hub whose public address is set to its local one, and a bot whose app secret Feishu refuses
    settings.AMUX_PUBLIC_BASE_URL = "http://127.0.0.1:8000"
    bot = make_feishu_bot(slug="coder", name="Coder")
    feishu_stub.fail_next("token", status=200, code=10014, msg="app secret invalid")
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)
    page = console_page.page

    # when: the operator opens its setup page and presses "verify"
    console_page.open(reverse("admin:agents_bot_setup", args=[bot.pk]))
    warnings = page.locator("[data-warning]")
    assert page.locator("#setup-event-url").input_value() == "http://127.0.0.1:8000/feishu/webhook/coder/"
    assert warnings.count() == 2  # not HTTPS, and a loopback host
    assert "HTTPS" in warnings.nth(0).inner_text() and "127.0.0.1" in warnings.nth(1).inner_text()
    page.click("#setup-verify-button")
    page.wait_for_selector('[data-check="refused"]')

    # then: the reason is on the page, and the dashboard and the bot page call the bot unhealthy with a fix link
    assert "app secret invalid" in page.locator("#setup-check").inner_text()
    console_page.screenshot("after-setup-refused-en")
    console_page.open("/admin/")
    row = page.locator('tr.bot-row[data-bot="coder"]')
    assert row.get_attribute("data-health") == "credentials_refused"
    cause = row.locator('a[data-cause="credentials_refused"]')
    assert "Feishu refused the app id and secret" in cause.inner_text()
    cause.click()
    page.wait_for_selector("#amux-setup")
    console_page.open(reverse("admin:agents_bot_change", args=[bot.pk]))
    assert page.locator('#bot-health [data-health="credentials_refused"]').count() == 1
    assert "app secret invalid" in page.locator("#bot-credentials").inner_text()
    console_page.screenshot("after-bot-page-en")
