"""The playground in a real browser (issue 14 item 8): from the admin index to a discuss group, an @-mention
answered and an un-addressed message judged, both shown live beside the message; no console error."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Bot
from console.models import PlaygroundGroup, PlaygroundMember
from console.playground.services import playground_members_sync
from feishu.discuss.sweep import discuss_wakes_sweep
from tests.agents.factories import LLMModelFactory
from tests.browser.conftest import ADMIN_PASSWORD
from tests.feishu.conftest import feishu_stub, make_feishu_bot  # noqa: F401  (fixtures)

REPLY_TIMEOUT_MS = 20000


@pytest.fixture
def discuss_group(transactional_db, make_feishu_bot):  # noqa: F811
    judge = LLMModelFactory(name="local-judge", supports_tool_calls=True)
    planner = make_feishu_bot(
        slug="planner", name="Planner", discuss_probe_mode=Bot.ProbeMode.MODEL, discuss_probe_model=judge
    )
    coder = make_feishu_bot(slug="coder", name="Coder", feishu_app_secret="")
    group = PlaygroundGroup.objects.create(name="Offsite planning", kind=PlaygroundGroup.Kind.GROUP)
    PlaygroundMember.objects.create(group=group, bot=planner, reply_mode=PlaygroundMember.ReplyMode.DISCUSS)
    PlaygroundMember.objects.create(group=group, bot=coder, reply_mode=PlaygroundMember.ReplyMode.MENTION)
    playground_members_sync(group=group)
    return group


def send(page, *, sender: str, text: str, mention: str = "") -> None:
    page.fill("#playground-sender", sender)
    if mention:
        page.check(f'#playground-mentions input[data-bot="{mention}"]')
    page.fill("#playground-text", text)
    page.click("#playground-send")


def test_the_playground_shows_a_reply_and_a_gate_decision_beside_each_message(
    console_page,
    operator,
    discuss_group,
    feishu_stub,  # noqa: F811
):
    # given: the operator reaches the playground from the admin index
    console_page.log_in(username="operator", password=ADMIN_PASSWORD)
    page = console_page.page
    page.click('#content-main a[href$="/admin/playground/playgroundgroup/"]')
    page.click("text=Open")
    page.wait_for_selector('#playground-mentions input[data-bot="coder"]')

    # when: Alice @-mentions the coder
    send(page, sender="Alice", text="draft a plan in three steps", mention="coder")

    # then: the coder's reply appears beside the message, with its turn and context decision
    reply = page.locator(".playground-message .playground-reply").first
    reply.wait_for(timeout=REPLY_TIMEOUT_MS)
    assert reply.inner_text().endswith("you said: draft a plan in three steps")
    assert page.locator('.playground-message a:text("Context decision")').count() == 1

    # when: Bob says something un-addressed, and the debounce ends (the beat sweeper's clock moved on)
    send(page, sender="Bob", text="lunch at noon")
    page.locator(".playground-message").nth(1).locator(".playground-gate-pending").wait_for(timeout=REPLY_TIMEOUT_MS)
    discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))

    # then: the planner's gate decision is shown: it stays silent, with the judge's cause
    silent = page.locator(".playground-message").nth(1).locator(".playground-gate-silent")
    silent.wait_for(timeout=REPLY_TIMEOUT_MS)
    assert "stay silent" in silent.inner_text() and "judged" in silent.inner_text()
    console_page.screenshot("playground-discuss-group")
    assert feishu_stub.requests == []
    # and a verdict's label reads against the timeline's background (issue 27: "Probe:" of a speak was 1.4:1)
    for verdict in ("speak", "silent"):
        assert (
            contrast_ratio(page, f"playground-gate playground-gate-{verdict}", within="#playground-timeline td") >= 4.5
        )


# The WCAG contrast ratio of an element of `classes` placed in the page's `within`, against the first opaque
# background up its ancestors (white when none is).
CONTRAST_JS = """([classes, within]) => {
  const probe = document.createElement("div");
  probe.className = classes;
  probe.textContent = "Probe: speak";
  document.querySelector(within).appendChild(probe);
  const rgb = (text) => text.match(/[\\d.]+/g).map(Number);
  const luminance = ([r, g, b]) => {
    const channel = (value) => { value /= 255; return value <= 0.03928 ? value / 12.92 : ((value + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  };
  let node = probe, background = [255, 255, 255];
  while (node) {
    const value = rgb(getComputedStyle(node).backgroundColor);
    if (value.length === 3 || value[3] > 0) { background = value.slice(0, 3); break; }
    node = node.parentElement;
  }
  const foreground = rgb(getComputedStyle(probe).color).slice(0, 3);
  probe.remove();
  const [light, dark] = [luminance(foreground), luminance(background)].sort((a, b) => b - a);
  return (light + 0.05) / (dark + 0.05);
}"""


def contrast_ratio(page, classes: str, *, within: str) -> float:
    return page.evaluate(CONTRAST_JS, [classes, within])
