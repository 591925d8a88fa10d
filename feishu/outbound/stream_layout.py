"""How a streamed answer is laid out over cards (R3): which part of the whole text the current card shows, and
where a card that must end (it outgrew CARD_CHUNK_CHARS, or Feishu's streaming limit is near) is cut.

Pure functions of the stored state and the text, no Feishu call: a re-run given the same state and text lays the
answer out the same way. A card ends at a block boundary; a code fence cut open is closed at the end of the card
and reopened at the top of the next (the state's `carry`), so every card renders on its own.
"""

from dataclasses import dataclass

from feishu.outbound.cards import fence_closing, open_fence
from feishu.outbound.stream_state import StreamState

# Room kept at a cut for the fence that closes it.
FENCE_CLOSING_ROOM = 12


@dataclass(frozen=True)
class Rollover:
    """A card ended at a cut: what it shows, and where the next card starts."""

    closed_text: str  # the ended card's text up to the cut, an open fence closed
    offset: int  # where the next card's share of the answer starts in the whole text
    carry: str  # the fence reopened at the top of the next card ("" when none was open)


def card_text_start(*, state: StreamState, text: str) -> int:
    """Where the current card's share of the answer starts: a continued card skips the blank lines."""
    start = state.offset
    if state.card_index:
        while start < len(text) and text[start] == "\n":
            start += 1
    return start


def card_body(*, state: StreamState, text: str) -> str:
    """What the current card should show of `text` (the whole answer so far)."""
    return state.carry + text[card_text_start(state=state, text=text) :]


def block_cut(body: str, *, limit: int, carry_len: int) -> int:
    """Where to end a card that outgrew `limit`: the last blank line outside a fence, else the last line end."""
    room = limit - FENCE_CLOSING_ROOM
    window = body[:room]
    position = window.rfind("\n\n")
    while position > carry_len and open_fence(window[:position]):
        position = window.rfind("\n\n", 0, position)
    if position <= carry_len:
        position = window.rfind("\n")
    if position <= carry_len:
        position = room
    return position


def rollover_at(*, state: StreamState, text: str, cut: int) -> Rollover:
    """The current card ended after `cut` characters of its body."""
    closed_text = card_body(state=state, text=text)[:cut]
    fence = open_fence(closed_text)
    if fence:
        closed_text += "\n" + fence_closing(fence)
    return Rollover(
        closed_text=closed_text,
        offset=card_text_start(state=state, text=text) + max(0, cut - len(state.carry)),
        carry=fence + "\n" if fence else "",
    )
