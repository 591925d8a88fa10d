"""U5 (issue 35): a tool call's arguments on an approval card. A secret split across values, spread over a nested
structure or escaped inside a serialized value withholds the whole; a secret inside one value is masked in place;
ordinary arguments pass unchanged (a table of hostile and harmless inputs, pure)."""

import json

import pytest

from agents.services.turns.approvals import arguments_shown
from core.redaction import ARGUMENTS_WITHHELD, REDACTED, redacted_arguments

SECRET = "sk-abcdef0123456789"
WITHHELD = dict(ARGUMENTS_WITHHELD)


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(character):04x}" for character in text)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"a": "sk-abc", "b": "def0123456789"}, WITHHELD),
        ({"b": "def0123456789", "a": "sk-abc"}, WITHHELD),  # reversed order
        ({"sk-abc": "def0123456789"}, WITHHELD),  # a key and its value
        ({"x": ["sk-a", {"y": "bcdef01"}, "23456789"]}, WITHHELD),  # nested
        ({"payload": json.dumps({"key": SECRET})}, {"payload": json.dumps({"key": REDACTED})}),  # whole in one value
        ({"payload": '{"key": "' + _escaped(SECRET) + '"}'}, WITHHELD),  # escaped inside a serialized value
        ({"url": "https://x.example/?k=sk-abcdef%30123456789"}, WITHHELD),  # one character URL-escaped
        ({"note": f"the key is {SECRET}"}, {"note": f"the key is {REDACTED}"}),
        ({"query": "deploys", "days": 7, "tags": ["a", "b"]}, {"query": "deploys", "days": 7, "tags": ["a", "b"]}),
        ({"text": "sk-abc is a prefix; def0 alone"}, {"text": "sk-abc is a prefix; def0 alone"}),
    ],
    ids=[
        "split",
        "split-reversed",
        "key-and-value",
        "nested",
        "whole-in-serialized",
        "escaped",
        "url-escaped",
        "inside-one-value",
        "ordinary",
        "prefix-only",
    ],
)
def test_u5_arguments_with_a_secret_across_values_are_withheld_whole(arguments, expected):
    assert redacted_arguments(arguments, secrets=[SECRET]) == expected


def test_u5_the_rendered_arguments_carry_no_piece_of_a_split_secret():
    shown = arguments_shown({"a": "sk-abcdef", "b": "0123456789"}, secrets=(SECRET,))

    assert "sk-abcdef" not in shown and "0123456789" not in shown
    assert json.loads(shown) == WITHHELD
