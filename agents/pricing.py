"""Tokens into money (A7): pure rules over a model's prices per million tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

MILLION = Decimal(1_000_000)
# Shown and returned to this many places: a single cheap turn costs fractions of a cent.
COST_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class Prices:
    """A model's prices per million tokens in `currency`; None where not set."""

    currency: str
    input: Decimal | None
    cached_input: Decimal | None
    output: Decimal | None

    @property
    def priced(self) -> bool:
        return self.input is not None or self.output is not None


def tokens_cost(prices: Prices, *, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> Decimal:
    """The cost of one call's tokens. Cached input tokens are part of input_tokens and take the cached price
    (the input price when the model has none); a price left empty counts as zero."""
    cached = min(max(cached_input_tokens, 0), input_tokens)
    input_price = prices.input or Decimal(0)
    cached_price = prices.cached_input if prices.cached_input is not None else input_price
    total = (input_tokens - cached) * input_price + cached * cached_price + output_tokens * (prices.output or 0)
    return (total / MILLION).quantize(COST_PLACES)


@dataclass
class Money:
    """Amounts per currency (models may be priced in different ones), and the tokens no price covered."""

    amounts: dict[str, Decimal] = field(default_factory=dict)
    unpriced_tokens: int = 0

    def add(self, prices: Prices | None, *, input_tokens: int, output_tokens: int, cached_input_tokens: int) -> None:
        if prices is None or not prices.priced:
            self.unpriced_tokens += input_tokens + output_tokens
            return
        cost = tokens_cost(
            prices, input_tokens=input_tokens, output_tokens=output_tokens, cached_input_tokens=cached_input_tokens
        )
        self.amounts[prices.currency] = self.amounts.get(prices.currency, Decimal(0)) + cost

    def merged(self, other: Money) -> Money:
        amounts = dict(self.amounts)
        for currency, amount in other.amounts.items():
            amounts[currency] = amounts.get(currency, Decimal(0)) + amount
        return Money(amounts=amounts, unpriced_tokens=self.unpriced_tokens + other.unpriced_tokens)

    def as_json(self) -> dict[str, object]:
        return {
            "amounts": {currency: str(amount) for currency, amount in sorted(self.amounts.items())},
            "unpriced_tokens": self.unpriced_tokens,
        }

    def __str__(self) -> str:
        # 4 places on pages (to the hundredth of a cent); the API gives every place.
        shown = [
            f"{amount.quantize(Decimal('0.0001'))} {currency}" for currency, amount in sorted(self.amounts.items())
        ]
        if not shown:
            return "–" if self.unpriced_tokens else "0"  # tokens of unpriced models cost nothing known, not zero
        return " + ".join(shown)
