"""Issue 25 (K1, K2) in the pure selector: pins first, never trimmed, counted against both limits, the newest
pins winning when they alone are over; a clear excludes what came before it as `cleared`, pins excepted."""

from __future__ import annotations

import dataclasses

from threadcontext.trimming import (
    EXCLUDED_CLEARED,
    EXCLUDED_ITEM_LIMIT,
    EXCLUDED_OWN_OUTPUT,
    EXCLUDED_PIN_OVER_BUDGET,
    EXCLUDED_SLASH_COMMAND,
    EXCLUDED_SUMMARISED,
    EXCLUDED_SUPERSEDED,
    ITEM_AGENT_OUTPUT,
    ITEM_HUMAN_MESSAGE,
    ITEM_SUMMARY,
    ITEM_TOPIC_ROOT,
    CandidateItem,
    SelectionRequest,
    select_context,
)

ME = "cli_coder"


def item(item_id: int, item_type: str = ITEM_HUMAN_MESSAGE, *, pin: int = 0, text: str = "x", bridge: str = ME):
    return CandidateItem(
        id=item_id,
        item_type=item_type,
        bridge_id=bridge,
        message_id=f"om_{item_id}",
        author_label="Alice",
        text=text,
        pin_order=pin,
    )


def request(**fields) -> SelectionRequest:
    return SelectionRequest(**{"bridge_id": ME, "bot_profile": "coder", "item_limit": 5, **fields})


def test_k2_a_pinned_root_comes_first_and_survives_forty_newer_messages_with_limit_five():
    candidates = [item(1, ITEM_TOPIC_ROOT, pin=1, text="REQUIREMENT")] + [item(i) for i in range(2, 42)]

    package = select_context(candidates=candidates, request=request())

    assert [selected.id for selected in package.selected] == [1, 38, 39, 40, 41]
    assert package.selected[0].pinned and package.selected[0].reason == "pinned"
    assert package.diagnostics["pinned_item_ids"] == [1]
    assert {excluded.reason for excluded in package.excluded} == {EXCLUDED_ITEM_LIMIT}


def test_k2_pins_count_against_the_char_budget():
    candidates = [item(1, pin=1, text="p" * 50), item(2, text="a" * 50), item(3, text="b" * 50)]
    budget = candidates[0].chars + candidates[2].chars

    package = select_context(candidates=candidates, request=request(max_chars=budget))

    assert [selected.id for selected in package.selected] == [1, 3]


def test_k2_when_pins_alone_are_over_the_limit_the_newest_pins_win_and_the_rest_are_named():
    # pin order (when pinned) differs from item order: item 1 was pinned last
    candidates = [item(1, pin=9), item(2, pin=3), item(3, pin=5), item(4)]

    package = select_context(candidates=candidates, request=request(item_limit=2))

    assert [selected.id for selected in package.selected] == [1, 3]
    excluded = {excluded.id: excluded.reason for excluded in package.excluded}
    assert excluded == {2: EXCLUDED_PIN_OVER_BUDGET, 4: EXCLUDED_ITEM_LIMIT}
    assert package.diagnostics["pins_over_budget_ids"] == [2]


def test_k2_a_pin_overrides_the_own_output_rule_but_not_a_slash_command():
    own = item(1, ITEM_AGENT_OUTPUT, pin=1)

    assert [selected.id for selected in select_context(candidates=[own], request=request()).selected] == [1]
    assert select_context(candidates=[own, item(2, ITEM_AGENT_OUTPUT)], request=request()).excluded[0].reason == (
        EXCLUDED_OWN_OUTPUT
    )
    slash = select_context(candidates=[own], request=request(is_slash_command=True))
    assert slash.selected == () and slash.excluded[0].reason == EXCLUDED_SLASH_COMMAND


def test_k1_a_clear_excludes_what_came_before_it_as_cleared_and_keeps_the_pins():
    candidates = [item(1, ITEM_TOPIC_ROOT, pin=1), item(2), item(3), item(4), item(5)]

    package = select_context(candidates=candidates, request=request(cleared_through_id=3))

    assert [selected.id for selected in package.selected] == [1, 4, 5]
    assert {excluded.id: excluded.reason for excluded in package.excluded} == {2: EXCLUDED_CLEARED, 3: EXCLUDED_CLEARED}
    assert package.diagnostics["trimmed_by_clear"] == 2


def test_k2_selection_is_deterministic_whatever_the_candidates_order():
    candidates = [item(i, pin=(i if i % 7 == 0 else 0)) for i in range(1, 30)]
    first = select_context(candidates=candidates, request=request())
    again = select_context(candidates=list(reversed(candidates)), request=request())
    assert dataclasses.asdict(first) == dataclasses.asdict(again)


def summary(item_id: int, covers_through: int, *, text: str = "summary text") -> CandidateItem:
    return CandidateItem(
        id=item_id,
        item_type=ITEM_SUMMARY,
        bridge_id=ME,
        message_id="",
        author_label="summary",
        text=text,
        covers_through_id=covers_through,
    )


def test_k3_the_newest_summary_comes_after_the_pins_and_before_the_newest_raw_items():
    candidates = [item(1, ITEM_TOPIC_ROOT, pin=1)] + [item(i) for i in range(2, 20)]
    candidates += [summary(20, covers_through=8), summary(30, covers_through=12)]

    package = select_context(candidates=candidates, request=request())

    assert [selected.id for selected in package.selected] == [1, 30, 17, 18, 19]
    assert [selected.reason for selected in package.selected[:2]] == ["pinned", "summary"]
    reasons = {excluded.id: excluded.reason for excluded in package.excluded}
    assert (
        reasons[20] == EXCLUDED_SUPERSEDED and reasons[5] == EXCLUDED_SUMMARISED and reasons[13] == EXCLUDED_ITEM_LIMIT
    )
    assert package.diagnostics["unsummarised_trimmed_ids"] == [13, 14, 15, 16]


def test_k3_a_summary_that_does_not_fit_covers_nothing_and_a_cleared_one_is_not_carried():
    raw = [item(i, text="r" * 20) for i in range(1, 6)]
    too_big = select_context(candidates=[*raw, summary(9, 3, text="s" * 500)], request=request(max_chars=200))
    assert 9 not in [selected.id for selected in too_big.selected]
    assert EXCLUDED_SUMMARISED not in {excluded.reason for excluded in too_big.excluded}

    cleared = select_context(candidates=[*raw, summary(9, 3)], request=request(cleared_through_id=9))
    assert {excluded.id: excluded.reason for excluded in cleared.excluded}[9] == EXCLUDED_CLEARED
