"""What a streamed answer (R3, feishu/outbound/streaming.py) keeps across crashes: its `StreamState`.

The caller stores the state on the turn (`as_dict()`) each time the controller reports it, which is BEFORE the
Feishu call that depends on the change (the card id before the reply that carries it, each sequence before the
update that uses it), and hands it back (`from_dict`) to a re-run, which therefore continues on the same card
with a higher sequence and never posts a second card or reply. Delivery rows are keyed by `stream_uuid`, so a
re-run finds the rows of the cards it posted before.
"""

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class StreamState:
    """What a caller stores on the turn (as `as_dict()`) and hands back to resume after a crash."""

    card_id: str = ""
    message_id: str = ""  # the reply carrying card_id
    sequence: int = 0  # the highest sequence used on card_id
    shown: str = ""  # the text the current card was last given
    card_index: int = 0  # 0 for the first card, +1 per rollover (part of the reply's uuid)
    offset: int = 0  # where the current card's text starts in the whole answer
    carry: str = ""  # a fence reopened at the top of the current card
    opened_at: float = 0.0  # epoch seconds when the current card started streaming
    closed_cards: list[dict[str, str]] = field(default_factory=list)
    is_fallback: bool = False  # the card path was refused: the answer goes out as plain replies
    fallback_message_ids: list[str] = field(default_factory=list)
    is_finished: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "StreamState":
        known = {name: value for name, value in (data or {}).items() if name in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def card_message_ids(self) -> list[str]:
        """The cards' messages, in order (closed cards, then the current card)."""
        ids = [card["message_id"] for card in self.closed_cards if card.get("message_id")]
        return [*ids, self.message_id] if self.message_id else ids

    @property
    def message_ids(self) -> list[str]:
        """Every message this answer posted, in order (the cards, then the plain fallbacks)."""
        return self.card_message_ids + self.fallback_message_ids


def stream_uuid(*, uuid_base: str, kind: str, index: int) -> str:
    """The uuid of the reply carrying a card, fixed per (answer, card); Feishu's limit is 50 characters."""
    return f"{uuid_base[:40]}-{kind}{index}"


# Told every change of the state, before the Feishu call that depends on it; stores it on the turn.
StateListener = Callable[[StreamState], None]
# The plain fallback: (the whole answer, the state so far) -> the message ids it posted, in order; idempotent.
PlainSender = Callable[[str, StreamState], list[str]]
