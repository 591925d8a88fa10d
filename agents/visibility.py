"""Seed 000's visibility mask: two bits, and the matrix that derives a message's mask (V1, V2, V4).

The mask is derived from the thread's runtime mode and the message kind; no caller ever supplies one.
"""

from enum import IntEnum


class VisibilityBit(IntEnum):
    UI_HISTORY = 0  # visible to the /history API
    CONTEXT_ASSEMBLY = 1  # assembled into the model's context messages


def bit_mask(*, bit: int) -> int:
    return 1 << bit


UI_HISTORY = bit_mask(bit=VisibilityBit.UI_HISTORY)  # 1
CONTEXT_ASSEMBLY = bit_mask(bit=VisibilityBit.CONTEXT_ASSEMBLY)  # 2

# (runtime_mode, message kind) -> mask. Chat and automation never share a thread, so this is the whole rule.
MASK_MATRIX: dict[tuple[str, str], int] = {
    ("chat", "user_message"): UI_HISTORY | CONTEXT_ASSEMBLY,  # 3
    ("chat", "agent_reply"): UI_HISTORY | CONTEXT_ASSEMBLY,  # 3
    ("automation", "user_message"): 0,
    ("automation", "agent_reply"): UI_HISTORY,  # 1
}


def message_mask(*, runtime_mode: str, kind: str) -> int:
    try:
        return MASK_MATRIX[(runtime_mode, kind)]
    except KeyError:
        raise ValueError(f"No visibility mask for runtime_mode={runtime_mode!r}, kind={kind!r}.") from None
