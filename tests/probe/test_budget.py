"""P5: the judge's budget from its own window and the newest contiguous suffix that fits (reference §1.5)."""

from hypothesis import given
from hypothesis import strategies as st

from agents.llm.base import ChatMessage, ToolCall
from probe.rules import (
    PROBE_CONTEXT_FLOOR_TOKENS,
    PROBE_CONTEXT_MAX_TOKENS,
    PROBE_MAX_OUTPUT_TOKENS,
    PROBE_PROMPT_OVERHEAD_TOKENS,
    TRUNCATION_SEPARATOR,
    admit_window,
    context_budget,
    message_tokens,
)

SEED_WINDOWS = [1, 512, 2048, 4096, 4097, 8192, 32000, 128000, 1_000_000]


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def _assert_budget_fits(window: int) -> None:
    budget = context_budget(window=window)
    effective_window = window if window > 0 else 8192
    if budget is None:
        # refused: not even a floor-sized input fits next to the output and overhead reserves
        assert effective_window - PROBE_MAX_OUTPUT_TOKENS - PROBE_PROMPT_OVERHEAD_TOKENS < PROBE_CONTEXT_FLOOR_TOKENS
        return
    assert budget + PROBE_MAX_OUTPUT_TOKENS + PROBE_PROMPT_OVERHEAD_TOKENS <= effective_window
    assert PROBE_CONTEXT_FLOOR_TOKENS <= budget <= PROBE_CONTEXT_MAX_TOKENS


def test_budget_never_exceeds_the_window_over_the_seed_windows_P5():
    """TestDiscussProbeContextBudgetNeverExceedsTheWindow over {1, 512, 2048, 4096, 4097, 8192, 32000, 128000, 1e6}."""
    for window in SEED_WINDOWS:
        _assert_budget_fits(window)


@given(st.integers(min_value=-10, max_value=2_000_000))
def test_budget_property_holds_for_any_window_P5(window):
    _assert_budget_fits(window)


def test_budget_worked_values_and_refusals_P5():
    """TestDiscussProbeContextBudgetRefusesUnusableWindows plus the reference's worked values."""
    assert context_budget(window=4097) is None  # model_window_too_small: 2048 + 2048 + 1024 > 4097
    assert context_budget(window=5120) == 2048  # the smallest usable window
    assert context_budget(window=8192) == 5120  # 5120 + 2048 + 1024 == 8192 exactly
    assert context_budget(window=0) == 5120  # undeclared falls back to 8192 and fits in it
    assert context_budget(window=128000) == 16384  # capped


def test_window_is_a_contiguous_suffix_P5():
    """TestAdmitDiscussProbeMessagesSelectsASuffix."""
    # given 4000-byte (1000-token) messages and a 2000-token budget
    messages = [user("a" * 4000), user("b" * 4000), user("newest")]
    # when
    window = admit_window(messages=messages, budget=2000)
    # then
    assert [m.content[:1] for m in window] == ["b", "n"]
    assert window[-1].content == "newest"
    # a single 40000-byte message at budget 10 still gives one (cut) message; nothing gives nothing
    assert len(admit_window(messages=[user("x" * 40000)], budget=10)) == 1
    assert admit_window(messages=[], budget=2000) == []


def test_window_stops_at_the_first_message_that_does_not_fit_P5():
    # given an older small message behind a big one: contiguity means it is not picked
    messages = [user("tiny"), user("c" * 8000), user("newest")]
    # when
    window = admit_window(messages=messages, budget=1000)
    # then
    assert [m.content for m in window] == ["newest"]


def test_window_survives_oversized_summaries_and_pins_none_P5():
    """TestAdmitDiscussProbeMessagesSurvivesOversizedSummaries: 5 summaries of ~4K tokens + '@bot are you there?'."""
    # given
    summaries = [ChatMessage(role="user", content=f"[summary {i}] " + "s" * 16000) for i in range(5)]
    messages = [*summaries, user("@bot are you there?")]
    # precondition: pinning the summaries (primary admission) would overflow a 16384 budget
    assert sum(message_tokens(m) for m in summaries) > PROBE_CONTEXT_MAX_TOKENS
    # when
    window = admit_window(messages=messages, budget=context_budget(window=128000))
    # then
    assert window
    assert window[-1].content == "@bot are you there?"
    assert sum(message_tokens(m) for m in window) <= PROBE_CONTEXT_MAX_TOKENS


def test_window_never_opens_on_an_orphaned_tool_result_P5():
    """TestAdmitDiscussProbeMessagesNeverOpensOnAnOrphanedToolResponse, including the 'Tool' casing variant."""
    call = ToolCall(name="search", arguments={"q": "x"}, id="c1")
    big_assistant = ChatMessage(role="assistant", content="a" * 12000, tool_calls=(call,))
    cases = [
        [big_assistant, ChatMessage(role="tool", content="result", tool_call_id="c1"), user("thanks")],
        [
            big_assistant,
            ChatMessage(role="tool", content="r1", tool_call_id="c1"),
            ChatMessage(role="tool", content="r2", tool_call_id="c2"),
            user("thanks"),
        ],
        [big_assistant, ChatMessage(role="Tool", content="result", tool_call_id="c1"), user("thanks")],  # type: ignore[arg-type]
    ]
    for messages in cases:
        # when
        window = admit_window(messages=messages, budget=2048)
        # then
        assert window
        assert window[0].role.lower() != "tool"
        assert window[-1].content == "thanks"


def test_window_is_empty_when_the_newest_message_is_a_tool_result_P5():
    messages = [user("run it"), ChatMessage(role="tool", content="done", tool_call_id="c1")]
    assert admit_window(messages=messages, budget=1) == []


def test_lone_oversized_newest_message_is_cut_head_and_tail_P5():
    """TestAdmitDiscussProbeMessagesBoundsAnOversizedNewestMessage: 80000 bytes at 8192 → cut to the budget."""
    # given
    text = "H" * 40000 + "T" * 40000
    # when
    window = admit_window(messages=[user(text)], budget=8192)
    # then
    (cut,) = window
    head, tail = cut.content.split(TRUNCATION_SEPARATOR)
    assert (len(head), len(tail)) == (8192 * 2 // 3, 8192 - 8192 * 2 // 3)
    assert set(head) == {"H"} and set(tail) == {"T"}
    assert "…" in cut.content
    assert message_tokens(cut) <= 8192


def test_oversized_structured_payload_gives_no_window_P5():
    """An oversized message carrying a tool payload cannot be cut: no_valid_window."""
    payload = ChatMessage(role="assistant", content="", tool_calls=(ToolCall(name="x", arguments={"d": "z" * 80000}),))
    assert admit_window(messages=[payload], budget=8192) == []


def test_budget_zero_admits_nothing_P5():
    assert admit_window(messages=[user("hi")], budget=0) == []


ROLES = st.sampled_from(["user", "assistant", "tool", "Tool"])
MESSAGES = st.lists(
    st.builds(lambda role, size: ChatMessage(role=role, content="m" * size), ROLES, st.integers(0, 30000)),
    max_size=25,
)


@given(MESSAGES, st.integers(min_value=1, max_value=16384))
def test_window_properties_hold_for_any_transcript_P5(messages, budget):
    """The window is a suffix of the input ending on the newest message (or empty), never opens on a tool
    result, and fits the budget - except a lone newest message, which is cut to the budget in characters."""
    window = admit_window(messages=messages, budget=budget)
    if not window:
        return
    assert window[0].role.lower() != "tool"
    if len(window) == 1 and TRUNCATION_SEPARATOR in window[0].content and window[0] != messages[-1]:
        assert len(window[0].content) == budget + len(TRUNCATION_SEPARATOR)
        return
    assert window == messages[len(messages) - len(window) :]
    if len(window) > 1:
        assert sum(message_tokens(m) for m in window) <= budget
    else:  # a lone newest message is kept when it fits in characters (1 char = 1 token, conservative)
        assert message_tokens(window[0]) <= budget or len(window[0].content) <= budget
