"""P6/P9: the judge's system prompt and the activation contract text."""

from agents.llm.base import ChatMessage
from probe.prompts import ACTIVATION_MARKER, ACTIVATION_NOTES_HEADING, activation_contract, judge_system_prompt
from probe.rules import DECIDE_TOOL, PROBE_MAX_OUTPUT_TOKENS, judge_request_build


def test_activation_contract_carries_the_marker_and_quotes_the_reason_P9():
    """TestGenerateDiscussActivationPrompt: the hard requirement, the reason as a `> reason` quote."""
    text = activation_contract(reason="answer dave's question about the deploy")
    assert ACTIVATION_MARKER in text
    assert ACTIVATION_NOTES_HEADING in text
    assert "> answer dave's question about the deploy" in text
    assert "not a licence for filler" in text
    assert "{" not in text


def test_blank_reason_renders_no_notes_P9():
    for reason in ("", "   ", "\n\t"):
        text = activation_contract(reason=reason)
        assert ACTIVATION_MARKER in text
        assert "evaluator's notes" not in text
        assert "{{" not in text and "{" not in text


def test_multiline_reason_is_quoted_line_by_line_P9():
    text = activation_contract(reason="option a: short comment\noption b: look it up first")
    assert "> option a: short comment\n> option b: look it up first" in text


def test_judge_prompt_frames_an_outside_evaluator_P6():
    text = judge_system_prompt(bot_name="Planner")
    assert text.startswith("You are an outside evaluator.")
    assert "The bot: Planner." in text.splitlines()
    for required in ("`send`", "`no_action`", "The `reason`", "advisory", "react only"):
        assert required in text


def test_request_builder_is_one_forced_decide_call_P6():
    window = [ChatMessage(role="user", content="hello")]
    request = judge_request_build(model_name="judge-1", bot_name="Planner", window=window)
    assert request.model == "judge-1"
    assert request.tools == (DECIDE_TOOL,)
    assert request.forced_tool == "decide"
    assert request.max_output_tokens == PROBE_MAX_OUTPUT_TOKENS
    assert [m.role for m in request.messages] == ["system", "user"]
    assert DECIDE_TOOL.parameters["required"] == ["should_act", "reason"]
    assert DECIDE_TOOL.parameters["properties"]["should_act"]["enum"] == ["send", "no_action"]
