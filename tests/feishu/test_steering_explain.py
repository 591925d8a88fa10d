"""Issue 25: explain (CLI, API, admin) shows pins, clears and summaries, on a decision made through the webhook
(lark-oapi against the local Feishu, the model and the summary model at the LLM stub, Celery eager)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.agents.factories import staff_user
from tests.agents.test_llm_adapters import model_for
from tests.stubs.llm_servers import StubResponse, openai_chat_body
from threadcontext.explain import decision_explain_text
from threadcontext.models import ThreadContextDecision, ThreadContextItem, Workspace

pytestmark = pytest.mark.django_db

ROOT = "om_root"
TOPIC = {"root_id": ROOT, "thread_id": "omt_1", "parent_id": ROOT}


@pytest.fixture
def decision(feishu, make_feishu_bot, llm_stub) -> ThreadContextDecision:
    """A pinned root, a clear, a summary: the decision of the second @ (limit 5: the pin, the summary, 3 raw)."""
    bot = make_feishu_bot(
        primary_model=model_for("openai_chat", llm_stub),
        summary_model=model_for("openai_chat", llm_stub),
        reply_format="text",
    )
    Workspace.objects.create(
        bot_profile=bot.slug, chat_id="oc_group", shared_thread_enabled=True, thread_context_limit=5
    )
    feishu.say(bot, text="REQUIREMENT: CSV only", message_id=ROOT)
    for index in range(3):
        feishu.say(bot, text=f"old idea {index}", message_id=f"om_old{index}", **TOPIC)
    feishu.say(bot, text="/context pin", mention=[bot], **TOPIC)  # the topic root
    feishu.say(bot, text="/context clear", mention=[bot], **TOPIC)
    for index in range(5):
        feishu.say(bot, text=f"new point {index}", message_id=f"om_new{index}", **TOPIC)
    for text in ("answer one", "SUMMARY OF NEW POINTS", "answer two"):
        llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text=text)))
    feishu.say(bot, text="first question", mention=[bot], **TOPIC)  # the pin + 5 raw: one trimmed, a summary follows
    feishu.say(bot, text="second question", mention=[bot], **TOPIC)
    return ThreadContextDecision.objects.latest("id")


def test_explain_cli_api_and_admin_show_pins_clears_and_summaries(decision, api_client, admin_client):
    root = ThreadContextItem.objects.get(item_type="topic_root")
    summary = ThreadContextItem.objects.filter(item_type="summary").order_by("id").first()
    assert decision.selected_item_ids[:2] == [root.pk, summary.pk]

    text = decision_explain_text(decision=decision)
    rows = [line.split()[:4] for line in text.splitlines()]
    assert [str(root.pk), "topic_root", "ou_alice", "pinned"] in rows
    assert [str(summary.pk), "summary", "summary", "summary"] in rows
    assert "cleared:       /context clear" in text and "summary:       item" in text
    assert {"cleared", "summarised"} <= {
        line.split()[3] for line in text.splitlines() if "old idea" in line or "new point 0" in line
    }

    api_client.force_authenticate(staff_user("staff", "threadcontext.view_threadcontextdecision"))  # U6
    data = api_client.get(reverse("api:threadcontext:decision", args=[decision.pk])).json()
    assert [item["reason"] for item in data["selected"][:2]] == ["pinned", "summary"]
    assert {"cleared", "summarised"} <= {item["reason"] for item in data["excluded"]}
    assert data["diagnostics"]["pinned_item_ids"] == [root.pk] and data["diagnostics"]["summary_item_id"] == summary.pk

    page = admin_client.get(reverse("admin:threadcontext_threadcontextdecision_explain", args=[decision.pk])).content
    html = page.decode()
    assert '<strong class="pinned">' in html and '<strong class="summary">' in html
    assert "Someone sent /context clear after it" in html
    assert "Covered by the summary this request carries" in html
