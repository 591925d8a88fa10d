"""P7: strict verdict parsing of the judge's `decide` call (reference §1.4, seed 003 review P2b)."""

import pytest

from agents.llm.base import ToolCall
from probe.rules import Outcome, verdict_parse


def decide(arguments, name: str = "decide") -> ToolCall:
    return ToolCall(name=name, arguments=arguments, id="call_1")


@pytest.mark.parametrize(
    ("calls", "should_act", "reason", "outcome"),
    [
        pytest.param(
            [decide({"should_act": "send", "reason": "asked directly"})],
            "send",
            "asked directly",
            "act",
            id="activation",
        ),
        pytest.param(
            [decide({"should_act": "no_action", "reason": "chatter"})],
            "no_action",
            "chatter",
            "no_action",
            id="no_action",
        ),
        pytest.param([], "", "", "missing", id="no decide call is missing"),
        pytest.param(
            [ToolCall(name="send", arguments={"text": "hi"})], "", "", "missing", id="another tool only is missing"
        ),
        pytest.param(
            [decide({"should_act": "react", "reason": "thumbs up"})],
            "",
            "thumbs up",
            "malformed",
            id="unknown value is malformed, reason kept",
        ),
        pytest.param([decide({"reason": "kept"})], "", "kept", "malformed", id="should_act missing, reason kept"),
        pytest.param([decide('{"should_act": "send"')], "", "", "malformed", id="input is a string"),
        pytest.param([decide({"should_act": "send"})], "", "", "malformed", id="reason omitted"),
        pytest.param([decide({"should_act": "send", "reason": None})], "", "", "malformed", id="reason null"),
        pytest.param([decide({"should_act": "send", "reason": 42})], "", "", "malformed", id="reason 42"),
        pytest.param(
            [decide({"should_act": None, "reason": "kept"})], "", "kept", "malformed", id="should_act null, reason kept"
        ),
        pytest.param(
            [decide({"should_act": "send", "reason": "ok"}, name="Decide")],
            "send",
            "ok",
            "act",
            id="Decide casing activates",
        ),
    ],
)
def test_verdict_parse_cases_P7(calls, should_act, reason, outcome):
    """TestExtractDiscussProbeDecision's 12 cases: name case-insensitive, values case-sensitive."""
    # when
    verdict = verdict_parse(tool_calls=calls)
    # then
    assert (verdict.should_act, verdict.reason, verdict.outcome) == (should_act, reason, outcome)
    assert verdict.activated is (outcome == "act")


# The seed's 15 malformed inputs (TestDiscussProbeFailsClosed), passed as the decide call's arguments.
MALFORMED_INPUTS = [
    None,
    "send",
    42,
    {},
    {"reason": "r"},
    {"should_act": "", "reason": "r"},
    {"should_act": "react", "reason": "r"},
    {"should_act": "SEND", "reason": "r"},
    {"should_act": "yes", "reason": "r"},
    True,
    ["send"],
    {"should_act": "send"},
    {"should_act": "send", "reason": None},
    {"should_act": "send", "reason": 42},
    {"should_act": None, "reason": "r"},
]


@pytest.mark.parametrize("arguments", MALFORMED_INPUTS, ids=[repr(value) for value in MALFORMED_INPUTS])
def test_malformed_input_fails_closed_P7(arguments):
    """P7: none of the 15 malformed inputs ever yields send or act."""
    # when
    verdict = verdict_parse(tool_calls=[decide(arguments)])
    # then
    assert verdict.outcome == Outcome.MALFORMED
    assert verdict.should_act == ""
    assert verdict.activated is False


def test_malformed_table_has_the_seeds_fifteen_inputs():
    assert len(MALFORMED_INPUTS) == 15


def test_valid_send_still_activates_P7():
    """The converse of failing closed: a well-formed send opens the gate."""
    verdict = verdict_parse(tool_calls=[decide({"should_act": "send", "reason": "  trimmed  "})])
    assert (verdict.activated, verdict.outcome, verdict.reason) == (True, "act", "trimmed")


def test_first_decide_call_wins_even_when_malformed_P7():
    """First decide call counts: a later valid one is not examined (Memoh, unlike Cahciua)."""
    # given
    calls = [
        ToolCall(name="lookup", arguments={}),
        decide({"should_act": "maybe", "reason": "unsure"}),
        decide({"should_act": "send", "reason": "second"}),
    ]
    # when
    verdict = verdict_parse(tool_calls=calls)
    # then
    assert (verdict.outcome, verdict.activated, verdict.reason) == ("malformed", False, "unsure")


def test_name_is_trimmed_and_case_insensitive_but_values_are_not_P7():
    assert verdict_parse(tool_calls=[decide({"should_act": "no_action", "reason": ""}, name=" DECIDE ")]).outcome == (
        "no_action"
    )
    assert verdict_parse(tool_calls=[decide({"should_act": "No_Action", "reason": ""})]).outcome == "malformed"


def test_extra_fields_are_ignored_P7():
    verdict = verdict_parse(tool_calls=[decide({"should_act": "send", "reason": "r", "confidence": 0.9})])
    assert verdict.outcome == "act"
