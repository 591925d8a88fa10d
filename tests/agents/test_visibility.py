import pytest

from agents.visibility import CONTEXT_ASSEMBLY, MASK_MATRIX, UI_HISTORY, VisibilityBit, bit_mask, message_mask


def test_v1_bits_are_history_1_and_context_2_and_nothing_else():
    assert bit_mask(bit=VisibilityBit.UI_HISTORY) == UI_HISTORY == 1
    assert bit_mask(bit=VisibilityBit.CONTEXT_ASSEMBLY) == CONTEXT_ASSEMBLY == 2
    assert [bit.name for bit in VisibilityBit] == ["UI_HISTORY", "CONTEXT_ASSEMBLY"]


@pytest.mark.parametrize(
    ("runtime_mode", "kind", "expected"),
    [
        ("chat", "user_message", 3),
        ("chat", "agent_reply", 3),
        ("automation", "user_message", 0),
        ("automation", "agent_reply", 1),
    ],
)
def test_v2_mask_matrix(runtime_mode, kind, expected):
    assert message_mask(runtime_mode=runtime_mode, kind=kind) == expected


def test_v2_matrix_has_exactly_four_cells():
    assert len(MASK_MATRIX) == 4


def test_unknown_runtime_mode_has_no_mask():
    with pytest.raises(ValueError, match="memory"):
        message_mask(runtime_mode="memory", kind="user_message")
