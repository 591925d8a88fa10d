"""Discuss cost (issue 11): the judge sees what changed in a topic since its last verdict, plus a short tail
(at least six messages in view, at least two of them seen: a burst brings its own context).

The rule is pure (probe.rules.since_last_verdict); the gate remembers where each topic's last verdict stopped
and sends the rest through the real adapter to the LLM stub, where the request body is read back.
"""

import pytest

from agents.llm.base import ChatMessage, ToolCall
from agents.models import Bot
from probe.rules import (
    PROBE_SEEN_TAIL_MESSAGES,
    PROBE_SEEN_TAIL_MIN_MESSAGES,
    admit_window,
    seen_mark,
    seen_tail_length,
    since_last_verdict,
)
from probe.services import probe_gate_run
from tests.stubs.llm_servers import StubResponse, openai_chat_body


def said(*texts: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text) for text in texts]


def decide_body(should_act: str) -> dict:
    return openai_chat_body(tool_calls=[("decide", {"should_act": should_act, "reason": "r"})])


def sent_contents(request) -> list[str]:
    return [message["content"] for message in request.json["messages"][1:]]  # after the system prompt


# --- The rule ------------------------------------------------------------------------------------------------


def test_without_a_mark_the_judge_sees_every_message():
    messages = said(*"abcdefgh")
    assert since_last_verdict(messages=messages, mark="", tail=2) == messages


def test_the_new_messages_come_with_the_tail_the_last_verdict_saw():
    # given: a verdict on a..j, then k, l, m arrived
    messages = said(*"abcdefghijklm")
    mark = seen_mark(messages=messages[:10])
    # when
    window = since_last_verdict(messages=messages, mark=mark, tail=5, least=1)
    # then: i, j (seen: five in view) and k, l, m (new)
    assert [message.content for message in window] == list("ijklm")


@pytest.mark.parametrize(
    ("new", "seen"),
    [(0, 6), (1, 5), (3, 3), (4, 2), (5, 2), (12, 2)],
)
def test_the_tail_shrinks_as_a_burst_brings_its_own_context_down_to_two(new, seen):
    # the defaults: six in view, two seen at least
    assert (PROBE_SEEN_TAIL_MESSAGES, PROBE_SEEN_TAIL_MIN_MESSAGES) == (6, 2)
    assert seen_tail_length(new=new) == seen
    messages = said(*(f"m{index}" for index in range(30)))
    end = len(messages) - new
    window = since_last_verdict(messages=messages, mark=seen_mark(messages=messages[:end]))
    assert [message.content for message in window] == [message.content for message in messages[end - seen :]]


def test_a_mark_no_longer_in_the_transcript_gives_every_message():
    # given: the verdict's place scrolled out of the transcript (more new messages than it holds)
    mark = seen_mark(messages=said("x", "y", "z"))
    messages = said(*"abcdef")
    # when / then
    assert since_last_verdict(messages=messages, mark=mark, tail=2) == messages


def test_nothing_new_still_judges_the_tail():
    messages = said(*"abcdef")
    window = since_last_verdict(messages=messages, mark=seen_mark(messages=messages), tail=2)
    assert [message.content for message in window] == ["e", "f"]


def test_a_repeated_short_message_is_not_taken_for_the_place_of_the_last_verdict():
    # given: the verdict ended on "ok"; new messages end on "ok" again
    messages = said("a", "b", "ok", "c", "d", "ok")
    mark = seen_mark(messages=messages[:3])
    # when
    window = since_last_verdict(messages=messages, mark=mark, tail=1)
    # then: the mark digests the last three messages, so the new "ok" does not match: c, d, ok are new
    assert [message.content for message in window] == ["ok", "c", "d", "ok"]


def test_the_window_never_opens_on_a_tool_result_after_the_cut():
    # given: the tail would start on a tool result whose call was cut off
    call = ChatMessage(role="assistant", content="", tool_calls=(ToolCall(name="look", arguments={}, id="c1"),))
    result = ChatMessage(role="tool", content="found", tool_call_id="c1")
    messages = [*said("a"), call, result, *said("b", "c")]
    mark = seen_mark(messages=messages[:4])
    # when: admit_window (P5) still runs on what is left, which is a contiguous suffix
    window = admit_window(messages=since_last_verdict(messages=messages, mark=mark, tail=2), budget=5000)
    # then
    assert [message.content for message in window] == ["b", "c"]


# --- The gate, through the real adapter ----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_second_probe_of_a_topic_sends_only_the_tail_and_what_is_new(make_judge, make_discuss_bot, llm_stub):
    # given: a first verdict on 10 messages of a topic
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    first = said(*(f"alice: message {index}" for index in range(10)))
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("no_action")))
    probe_gate_run(bot=bot, transcript=first, topic="oc_1:group")
    # when: three more arrive and the topic is judged again
    second = [*first, *said("bob: a", "carol: b", "bob: @Planner c?")]
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("send")))
    result = probe_gate_run(bot=bot, transcript=second, topic="oc_1:group")
    # then: the first request had all ten; the second three seen (six in view) and the three new
    first_request, second_request = llm_stub.requests_for("openai_chat")
    assert sent_contents(first_request) == [message.content for message in first]
    assert sent_contents(second_request) == [message.content for message in second[-PROBE_SEEN_TAIL_MESSAGES:]]
    assert result.activated is True


@pytest.mark.django_db
def test_a_burst_after_a_verdict_goes_out_with_only_the_two_newest_seen_messages(
    make_judge, make_discuss_bot, llm_stub
):
    # given: a verdict on ten messages, then a burst of eight (the debounced probe's shape)
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    first = said(*(f"alice: message {index}" for index in range(10)))
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("no_action")))
    probe_gate_run(bot=bot, transcript=first, topic="oc_1:group")
    burst = said(*(f"bob: part {index}" for index in range(7)), "carol: @Planner what now?")
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("send")))
    # when
    result = probe_gate_run(bot=bot, transcript=[*first, *burst], topic="oc_1:group")
    # then: alice's last two, and the whole burst
    expected = [message.content for message in [*first[-PROBE_SEEN_TAIL_MIN_MESSAGES:], *burst]]
    assert sent_contents(llm_stub.requests_for("openai_chat")[1]) == expected
    assert result.activated is True


@pytest.mark.django_db
def test_after_a_malformed_verdict_the_next_probe_sees_those_messages_again(make_judge, make_discuss_bot, llm_stub):
    # given: a judge answer that is no verdict (text, no decide call)
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    first = said(*(f"alice: message {index}" for index in range(10)))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="I think it should answer.")))
    probe_gate_run(bot=bot, transcript=first, topic="oc_1:group")
    # when
    second = [*first, *said("bob: a")]
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("no_action")))
    probe_gate_run(bot=bot, transcript=second, topic="oc_1:group")
    # then: nothing was marked judged, so all eleven go out
    assert sent_contents(llm_stub.requests_for("openai_chat")[1]) == [message.content for message in second]


@pytest.mark.django_db
def test_another_topic_or_no_topic_is_judged_whole(make_judge, make_discuss_bot, llm_stub):
    # given: a verdict in topic oc_1
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    messages = said(*(f"alice: message {index}" for index in range(10)))
    for _ in range(3):
        llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("no_action")))
    probe_gate_run(bot=bot, transcript=messages[:8], topic="oc_1:group")
    # when: the same messages in another topic, and with no topic named
    probe_gate_run(bot=bot, transcript=messages, topic="oc_2:group")
    probe_gate_run(bot=bot, transcript=messages)
    # then
    _, other_topic, no_topic = llm_stub.requests_for("openai_chat")
    assert sent_contents(other_topic) == sent_contents(no_topic) == [message.content for message in messages]
