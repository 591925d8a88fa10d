"""Issue 25 (ARCHITECTURE §11.4 K3) through the webhook: a long thread's turn is followed by a summary task (eager
Celery) that writes a summary item of the trimmed items with the bot's summary model (the real OpenAI SDK at the
LLM stub); the next turn's model input holds it before the raw items; a later summary covers the earlier one; a
failing summary model changes nothing; no model, no summary, and explain says why."""

from __future__ import annotations

import logging

import pytest

from agents.models import Turn
from feishu.summaries import SUMMARY_INSTRUCTIONS, summary_tokens_by_bot
from tests.agents.test_llm_adapters import model_for
from tests.stubs.llm_servers import StubResponse, openai_chat_body, openai_error_body
from threadcontext.explain import decision_explain_text
from threadcontext.models import ThreadContextDecision, ThreadContextItem, Workspace

pytestmark = pytest.mark.django_db

ROOT = "om_root"
TOPIC = {"root_id": ROOT, "thread_id": "omt_1", "parent_id": ROOT}


def long_topic(feishu, bot, count: int = 12) -> None:
    Workspace.objects.create(
        bot_profile=bot.slug, chat_id="oc_group", shared_thread_enabled=True, thread_context_limit=5
    )
    feishu.say(bot, text="We build a CSV export for the finance team", message_id=ROOT)
    for index in range(count):
        feishu.say(bot, text=f"detail {index}: column {index} is required", message_id=f"om_d{index}", **TOPIC)


def summary_requests(llm_stub) -> list[dict]:
    return [
        request.json
        for request in llm_stub.requests_for("openai_chat")
        if request.json["messages"][0]["content"] == SUMMARY_INSTRUCTIONS
    ]


def user_text(body: dict) -> str:
    return [message for message in body["messages"] if message["role"] == "user"][-1]["content"]


def test_k3_a_long_thread_gets_a_summary_after_the_turn_and_the_next_turn_carries_it_first(
    feishu, make_feishu_bot, llm_stub
):
    bot = make_feishu_bot(
        primary_model=model_for("openai_chat", llm_stub),
        summary_model=model_for("openai_chat", llm_stub),
        reply_format="text",
    )
    long_topic(feishu, bot)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="first answer")))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="SUMMARY: CSV export, columns 0-6")))

    feishu.say(bot, text="what is required?", mention=[bot], **TOPIC)

    first = ThreadContextDecision.objects.latest("id")
    trimmed = first.diagnostics["unsummarised_trimmed_ids"]
    assert trimmed  # 13 eligible (the root, details 0-11), 5 kept
    [summary] = ThreadContextItem.objects.filter(item_type="summary")
    covered = ThreadContextItem.objects.filter(text__startswith="detail", pk__in=summary.metadata["covers"])
    assert sorted(covered.values_list("message_id", flat=True)) == sorted(f"om_d{index}" for index in range(7))
    assert ThreadContextItem.objects.get(item_type="topic_root").pk in summary.metadata["covers"]
    assert "SUMMARY: CSV export, columns 0-6" in summary.text and "sources: #" in summary.text
    [asked] = summary_requests(llm_stub)
    assert "detail 0: column 0 is required" in user_text(asked) and "detail 11" not in user_text(asked)
    assert Turn.objects.get().status == Turn.Status.DELIVERED  # the reply went first, the summary after it

    feishu.say(bot, text="and the format?", mention=[bot], **TOPIC)

    second = ThreadContextDecision.objects.latest("id")
    assert second.selected_item_ids[0] == summary.pk and second.diagnostics["summary_item_id"] == summary.pk
    primary_input = user_text(
        [
            body
            for body in (r.json for r in llm_stub.requests_for("openai_chat"))
            if body not in summary_requests(llm_stub)
        ][-1]
    )
    assert primary_input.index("SUMMARY: CSV export") < primary_input.index("detail 11: column 11")
    assert "detail 0: column 0" not in primary_input
    assert {item["reason"] for item in second.excluded if item["id"] in summary.metadata["covers"]} == {"summarised"}
    assert "summary:       item" in decision_explain_text(decision=second)

    # the newer trimmed items get a later summary, which covers the earlier one too
    later = ThreadContextItem.objects.filter(item_type="summary").order_by("-id").first()
    assert later.pk != summary.pk and set(summary.metadata["covers"]) < set(later.metadata["covers"])
    assert "Earlier summary:" in user_text(summary_requests(llm_stub)[-1])
    spent = summary_tokens_by_bot(bridge_ids=[bot.bridge_id])[bot.bridge_id]
    assert spent["input"] > 0 and spent["output"] > 0


def test_k3_a_failing_summary_model_changes_nothing_and_is_logged(feishu, make_feishu_bot, llm_stub, caplog):
    bot = make_feishu_bot(
        primary_model=model_for("openai_chat", llm_stub),
        summary_model=model_for("openai_chat", llm_stub),
        reply_format="text",
    )
    long_topic(feishu, bot)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="the answer")))
    llm_stub.enqueue(
        "openai_chat", StubResponse(status=500, body=openai_error_body(message="upstream down", type_="server_error"))
    )

    with caplog.at_level(logging.WARNING, logger="feishu.summaries"):
        feishu.say(bot, text="what is required?", mention=[bot], **TOPIC)

    assert Turn.objects.get().status == Turn.Status.DELIVERED
    assert feishu.stub.sent_texts()[-1] == "the answer"
    assert not ThreadContextItem.objects.filter(item_type="summary").exists()
    assert "context summary failed; nothing changed" in caplog.text


def test_k3_without_a_summary_or_probe_model_no_summary_and_explain_says_so(feishu, make_feishu_bot, llm_stub):
    bot = make_feishu_bot(primary_model=model_for("openai_chat", llm_stub), reply_format="text")
    long_topic(feishu, bot)

    feishu.say(bot, text="what is required?", mention=[bot], **TOPIC)

    assert not ThreadContextItem.objects.filter(item_type="summary").exists()
    assert len(llm_stub.requests_for("openai_chat")) == 1
    explained = decision_explain_text(decision=ThreadContextDecision.objects.latest("id"))
    assert "summary:       none will be written: no summary model" in explained
