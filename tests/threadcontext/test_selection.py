"""The pure selector (C5): rules, exclusion reasons, stable trimming, determinism. No database."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from threadcontext.trimming import (
    EXCLUDED_CHAR_BUDGET,
    EXCLUDED_CURRENT_REQUEST,
    EXCLUDED_DUPLICATE,
    EXCLUDED_ITEM_LIMIT,
    EXCLUDED_NOT_IN_MODE,
    EXCLUDED_OWN_OUTPUT,
    EXCLUDED_SLASH_COMMAND,
    EXCLUSION_REASONS,
    ITEM_AGENT_OUTPUT,
    ITEM_HUMAN_MESSAGE,
    ITEM_TOPIC_ROOT,
    MODE_OWNER_ONLY,
    MODE_SHARED,
    CandidateItem,
    SelectionRequest,
    select_context,
)

ME = "cli_coder"
OTHER = "cli_planner"


def item(item_id: int, item_type: str, bridge_id: str = ME, text: str = "x", label: str = "", message_id: str = ""):
    return CandidateItem(
        id=item_id,
        item_type=item_type,
        bridge_id=bridge_id,
        message_id=message_id or f"om_{item_id}",
        author_label=label or ("planner/s" if item_type == ITEM_AGENT_OUTPUT else "Alice"),
        text=text,
    )


def request(**overrides) -> SelectionRequest:
    values = {"bridge_id": ME, "bot_profile": "coder", "mode": MODE_SHARED, "item_limit": 20, "max_chars": 24000}
    values.update(overrides)
    return SelectionRequest(**values)


def reasons(package) -> dict[int, str]:
    return {excluded.id: excluded.reason for excluded in package.excluded}


def test_c5_shared_mode_selects_topic_root_human_messages_and_other_bots_outputs_oldest_first():
    # given
    candidates = [
        item(3, ITEM_AGENT_OUTPUT, OTHER, "plan"),
        item(1, ITEM_TOPIC_ROOT, ME, "root"),
        item(2, ITEM_HUMAN_MESSAGE, ME, "discussion"),
    ]
    # when
    package = select_context(candidates=candidates, request=request())
    # then
    assert [selected.id for selected in package.selected] == [1, 2, 3]
    assert package.thread_context == "Alice: root\nAlice: discussion\nplanner/s: plan"
    assert package.excluded == ()


def test_c5_every_selected_item_carries_its_source_label():
    candidates = [item(1, ITEM_HUMAN_MESSAGE, ME, "hi", label="ou_xxx"), item(2, ITEM_AGENT_OUTPUT, OTHER, "p")]
    package = select_context(candidates=candidates, request=request())
    assert [selected.source for selected in package.selected] == ["ou_xxx", "planner/s"]
    assert [selected.line for selected in package.selected] == ["ou_xxx: hi", "planner/s: p"]


def test_c5_own_agent_output_is_excluded_as_own_output():
    candidates = [item(1, ITEM_AGENT_OUTPUT, ME, "mine"), item(2, ITEM_AGENT_OUTPUT, OTHER, "theirs")]
    package = select_context(candidates=candidates, request=request())
    assert [selected.id for selected in package.selected] == [2]
    assert reasons(package) == {1: EXCLUDED_OWN_OUTPUT}


def test_c5_owner_only_excludes_human_messages_as_not_in_mode_and_keeps_root_and_other_outputs():
    candidates = [
        item(1, ITEM_TOPIC_ROOT, ME),
        item(2, ITEM_HUMAN_MESSAGE, ME),
        item(3, ITEM_AGENT_OUTPUT, OTHER),
    ]
    package = select_context(candidates=candidates, request=request(mode=MODE_OWNER_ONLY))
    assert [selected.id for selected in package.selected] == [1, 3]
    assert reasons(package) == {2: EXCLUDED_NOT_IN_MODE}


def test_c5_other_bridges_copies_of_human_messages_are_not_this_bots_context():
    candidates = [item(1, ITEM_HUMAN_MESSAGE, OTHER), item(2, ITEM_TOPIC_ROOT, OTHER), item(3, ITEM_HUMAN_MESSAGE, ME)]
    package = select_context(candidates=candidates, request=request())
    assert [selected.id for selected in package.selected] == [3]
    assert reasons(package) == {1: EXCLUDED_NOT_IN_MODE, 2: EXCLUDED_NOT_IN_MODE}


def test_c5_slash_command_selects_nothing_and_says_why():
    candidates = [item(1, ITEM_TOPIC_ROOT, ME), item(2, ITEM_AGENT_OUTPUT, OTHER)]
    package = select_context(candidates=candidates, request=request(is_slash_command=True))
    assert package.selected == ()
    assert reasons(package) == {1: EXCLUDED_SLASH_COMMAND, 2: EXCLUDED_SLASH_COMMAND}


def test_c5_disabled_thread_context_selects_nothing_as_not_in_mode():
    candidates = [item(1, ITEM_TOPIC_ROOT, ME), item(2, ITEM_AGENT_OUTPUT, OTHER)]
    package = select_context(candidates=candidates, request=request(thread_context_enabled=False))
    assert package.selected == ()
    assert reasons(package) == {1: EXCLUDED_NOT_IN_MODE, 2: EXCLUDED_NOT_IN_MODE}
    assert package.diagnostics["thread_context_enabled"] is False


def test_c5_current_request_message_is_never_selected():
    candidates = [item(1, ITEM_TOPIC_ROOT, ME, "root that @s the bot", message_id="om_root")]
    package = select_context(candidates=candidates, request=request(message_id="om_root"))
    assert package.selected == ()
    assert reasons(package) == {1: EXCLUDED_CURRENT_REQUEST}


def test_c5_a_bot_sent_root_also_recorded_as_that_bots_output_is_selected_once():
    candidates = [
        item(1, ITEM_AGENT_OUTPUT, OTHER, "daily report", message_id="om_x"),
        item(2, ITEM_TOPIC_ROOT, ME, "daily report", message_id="om_x"),
    ]
    package = select_context(candidates=candidates, request=request())
    assert [selected.id for selected in package.selected] == [2]
    assert reasons(package) == {1: EXCLUDED_DUPLICATE}


def test_c5_item_limit_trims_the_oldest():
    candidates = [item(i, ITEM_HUMAN_MESSAGE, ME, f"m{i}") for i in range(1, 6)]
    package = select_context(candidates=candidates, request=request(item_limit=3))
    assert [selected.id for selected in package.selected] == [3, 4, 5]
    assert reasons(package) == {1: EXCLUDED_ITEM_LIMIT, 2: EXCLUDED_ITEM_LIMIT}
    assert package.diagnostics["trimmed_by_item_limit"] == 2


def test_c5_char_budget_trims_the_oldest_and_an_older_small_item_is_not_resurrected():
    # given: each line "Alice: <text>" + newline; budget fits the newest two big ones only
    candidates = [
        item(1, ITEM_HUMAN_MESSAGE, ME, "s"),  # small enough to fit the remainder, but older than a cut
        item(2, ITEM_HUMAN_MESSAGE, ME, "b" * 50),
        item(3, ITEM_HUMAN_MESSAGE, ME, "c" * 50),
        item(4, ITEM_HUMAN_MESSAGE, ME, "d" * 50),
    ]
    line_chars = len("Alice: ") + 50 + 1
    # when
    package = select_context(candidates=candidates, request=request(max_chars=2 * line_chars + 5))
    # then
    assert [selected.id for selected in package.selected] == [3, 4]
    assert reasons(package) == {1: EXCLUDED_CHAR_BUDGET, 2: EXCLUDED_CHAR_BUDGET}
    assert package.diagnostics["trimmed_by_char_budget"] == 2
    assert package.diagnostics["context_chars"] == 2 * line_chars - 1


def test_c6_truncated_items_are_flagged_in_the_selection_and_diagnostics():
    truncated = CandidateItem(
        id=7,
        item_type=ITEM_AGENT_OUTPUT,
        bridge_id=OTHER,
        message_id="om_7",
        author_label="p",
        text="t",
        truncated=True,
    )
    package = select_context(candidates=[truncated], request=request())
    assert package.selected[0].truncated is True
    assert package.diagnostics["truncated_item_ids"] == [7]


def test_c11_exclusion_reasons_are_a_fixed_set_of_constants():
    assert EXCLUSION_REASONS == (
        "own_output",
        "item_limit",
        "char_budget",
        "not_in_mode",
        "slash_command",
        "current_request",
        "duplicate",
        "cleared",
        "pin_over_budget",
        "summarised",
        "superseded",
    )


# --- the stable-trimming property ---------------------------------------------------------------------------

ITEM_TYPES = [ITEM_TOPIC_ROOT, ITEM_HUMAN_MESSAGE, ITEM_AGENT_OUTPUT]
candidate_lists = st.lists(
    st.tuples(st.sampled_from(ITEM_TYPES), st.sampled_from([ME, OTHER]), st.integers(min_value=0, max_value=120)),
    max_size=60,
)


def eligible_by_spec(candidates: list[CandidateItem], mode: str) -> list[CandidateItem]:
    """C5 restated independently: other bots' outputs; own root; own discussion in shared mode."""
    eligible = []
    for candidate in sorted(candidates, key=lambda c: c.id):
        if candidate.item_type == ITEM_AGENT_OUTPUT:
            keep = candidate.bridge_id != ME
        elif candidate.item_type == ITEM_TOPIC_ROOT:
            keep = candidate.bridge_id == ME
        else:
            keep = candidate.bridge_id == ME and mode == MODE_SHARED
        if keep:
            eligible.append(candidate)
    return eligible


@settings(max_examples=300, deadline=None)
@given(
    rows=candidate_lists,
    mode=st.sampled_from([MODE_SHARED, MODE_OWNER_ONLY]),
    item_limit=st.integers(min_value=0, max_value=25),
    max_chars=st.integers(min_value=0, max_value=2000),
    shuffle_seed=st.randoms(use_true_random=False),
)
def test_c5_trimming_is_a_stable_contiguous_newest_suffix_within_both_limits(
    rows, mode, item_limit, max_chars, shuffle_seed
):
    # given: any item sequence, handed to the selector in any order
    candidates = [
        item(index + 1, item_type, bridge, "y" * length) for index, (item_type, bridge, length) in enumerate(rows)
    ]
    shuffled = list(candidates)
    shuffle_seed.shuffle(shuffled)
    selection_request = request(mode=mode, item_limit=item_limit, max_chars=max_chars)
    # when
    package = select_context(candidates=shuffled, request=selection_request)
    # then: a contiguous newest suffix of the eligible items, in write order
    eligible = eligible_by_spec(candidates, mode)
    selected_ids = [selected.id for selected in package.selected]
    suffix_ids = [candidate.id for candidate in eligible[len(eligible) - len(selected_ids) :]] if selected_ids else []
    assert selected_ids == suffix_ids
    # within both limits
    assert len(selected_ids) <= item_limit
    assert sum(selected.chars for selected in package.selected) <= max_chars
    # and maximal: the next older eligible item would have broken a limit
    if len(selected_ids) < len(eligible):
        next_older = eligible[len(eligible) - len(selected_ids) - 1]
        used = sum(selected.chars for selected in package.selected)
        assert len(selected_ids) == item_limit or used + next_older.chars > max_chars
    # every candidate is either selected or excluded with a known reason
    assert {excluded.reason for excluded in package.excluded} <= set(EXCLUSION_REASONS)
    assert len(package.selected) + len(package.excluded) == len(candidates)
    # deterministic: the same input in another order gives the same package
    assert select_context(candidates=candidates, request=selection_request) == package
