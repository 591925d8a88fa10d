"""T1: the offline `local_rules` provider — a deterministic echo agent and a rule-based judge, labelled as such."""

import pytest

from agents.llm.base import ChatMessage, CompletionRequest
from agents.llm.local_rules import ECHO_LABEL, bot_name_from, is_question, judge_verdict
from agents.llm.registry import llm_client_for
from agents.models import Provider
from probe.rules import judge_request_build, verdict_parse
from tests.agents.factories import LLMModelFactory, ProviderFactory


@pytest.mark.parametrize(
    ("newest", "replies_to_bot", "expected"),
    [
        ("Tutu, can you check the build", False, "send"),  # addressed by name
        ("@Tutu look at this", False, "send"),
        ("tutu: ping", False, "send"),  # case-insensitive
        ("what time is the standup?", False, "send"),  # a question
        ("who owns the deploy", False, "send"),
        ("这个怎么部署", False, "send"),
        ("部署好了吗", False, "send"),
        ("thanks, that fixed it", True, "send"),  # replies to the bot
        ("lunch was great", False, "no_action"),
        ("+1", False, "no_action"),
        ("the tutus arrived", False, "no_action"),  # "Tutu" only as part of a word
    ],
)
def test_t1_rule_based_judge_table(newest, replies_to_bot, expected):
    # when
    should_act, reason = judge_verdict(bot_name="Tutu", newest_text=newest, replies_to_bot=replies_to_bot)
    # then
    assert should_act == expected
    assert reason.startswith("rule-based: ")


def test_t1_bot_name_is_read_from_the_system_prompt():
    assert (
        bot_name_from((ChatMessage(role="system", content="You are an evaluator.\nThe bot: Tutu.\nMore."),)) == "Tutu"
    )
    assert bot_name_from((ChatMessage(role="system", content='You are "Ada", a helper.'),)) == "Ada"
    assert bot_name_from((ChatMessage(role="system", content="You are an assistant named Bob."),)) == "Bob"
    assert bot_name_from((ChatMessage(role="system", content="Be helpful."),)) == ""


def test_t1_question_detection_ignores_statements():
    assert is_question("Is it done") is True
    assert is_question("alice: how do I deploy") is True
    assert is_question("It is done.") is False


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ([ChatMessage(role="user", content="alice: Tutu, summarise please")], "send"),
        ([ChatMessage(role="user", content="alice: nice weather today")], "no_action"),
        (
            [
                ChatMessage(role="user", content="alice: deploy?"),
                ChatMessage(role="assistant", content="Deployed."),
                ChatMessage(role="user", content="alice: great work"),
            ],
            "send",
        ),
    ],
)
def test_t1_local_rules_answers_the_probes_forced_decide_request(window, expected):
    # given: the probe's own request builder (the real path) and a local_rules model from the registry
    model = LLMModelFactory(provider=ProviderFactory(kind=Provider.Kind.LOCAL_RULES), name="rules")
    request = judge_request_build(model_name=model.name, bot_name="Tutu", window=window)
    # when
    result = llm_client_for(model=model).complete(request)
    verdict = verdict_parse(tool_calls=result.tool_calls)
    # then
    assert [call.name for call in result.tool_calls] == ["decide"]
    assert verdict.should_act == expected
    assert verdict.reason.startswith("rule-based: ")
    assert result.usage.input_tokens > 0


@pytest.mark.django_db
def test_t1_local_rules_agent_echo_is_labelled_and_deterministic():
    # given
    model = LLMModelFactory(provider=ProviderFactory(kind=Provider.Kind.LOCAL_RULES), name="rules")
    request = CompletionRequest(
        model="rules",
        messages=(
            ChatMessage(role="system", content="You are Demo."),
            ChatMessage(role="user", content="one"),
            ChatMessage(role="assistant", content="two"),
            ChatMessage(role="user", content="  three\n  four "),
        ),
    )
    client = llm_client_for(model=model)
    # when
    first, second = client.complete(request), client.complete(request)
    # then
    assert first.text == f"{ECHO_LABEL} I received 2 context messages; you said: three four"
    assert first == second
    assert first.tool_calls == ()


# --- The demo's echo is the person's words (issue 14 item 8): the real renderer and contract, never echoed ---


def _echo(*contents: str) -> str:
    from agents.llm.base import ChatMessage, CompletionRequest
    from agents.llm.local_rules import LocalRulesClient

    messages = tuple(ChatMessage(role="user", content=content) for content in contents)
    return LocalRulesClient().complete(CompletionRequest(model="local", messages=messages)).text


def test_the_echo_of_a_wrapped_prompt_is_the_user_request_alone():
    from threadcontext.rendering import quoted_reply_wrap, thread_mode_wrap, topic_wrap

    # given: the bridge's three wrappers, nested as the renderer nests them
    prompt = quoted_reply_wrap(
        quoted_text="the old plan",
        conversation_input=topic_wrap(
            topic_root_text="Snake game",
            request=thread_mode_wrap(thread_context="Bob: keep it simple", request_text="draft a plan"),
        ),
    )

    # when
    text = _echo(prompt)

    # then: "you said" is the request alone; the thread context's line is counted (issue 22: the demo says how
    # much context it got)
    assert text == f"{ECHO_LABEL} I received 0 context messages and 1 thread context item; you said: draft a plan"


def test_the_echo_counts_the_lines_of_a_discuss_transcript():
    from feishu.channel.discuss_context import REQUEST_LABEL, TRANSCRIPT_HEADER

    prompt = "\n".join([TRANSCRIPT_HEADER, "ou_alice: red build", "you: on it", REQUEST_LABEL, "why red?"])
    assert _echo(prompt) == f"{ECHO_LABEL} I received 0 context messages and 2 thread context items; you said: why red?"


def test_the_echo_of_an_activated_discuss_turn_skips_the_activation_contract():
    from probe.prompts import activation_contract

    # given: the person's message, then the contract the hub appends (P9)
    contract = activation_contract(reason="rule-based: the newest message is a question")

    # when
    first = _echo("earlier", "what should we build first?", contract)
    second = _echo("earlier", "what should we build first?", contract)

    # then: the person's words, the same both times; no contract text
    assert first == f"{ECHO_LABEL} I received 1 context message; you said: what should we build first?"
    assert second == first
    assert "HARD REQUIREMENT" not in first
