"""The one redaction step (issue 30): every secret the hub holds, and its common encodings, masked in any text.

It runs wherever text leaves or enters the hub (a reply to Feishu or REST, the model's input, tool output, error
texts, MCP Test output); the secrets come from `agents.secrets.hub_secrets`. Pure functions, no ORM.

What is caught, for each secret of at least MIN_SECRET_CHARS characters:
- the value as is, and reversed, each also with whitespace or punctuation between its characters (a model asked
  to "spell it out" or "split it with dots");
- its base64 (standard and URL-safe alphabet, at each of the three byte alignments, so a secret inside a longer
  encoded text is found as well), its hex, and its URL encoding.
Matching is case-sensitive (a case-insensitive pattern made a 3 MB text take 14 times as long); hex and URL
escapes are listed in both cases instead.

Redaction runs before any truncation: a text cut first could keep a prefix of a secret that no longer matches.
"""

import base64
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import quote, quote_plus, unquote

REDACTED = "[redacted]"
# Twelve characters: every credential the hub stores (provider keys, Feishu app secrets and tokens, Django's
# SECRET_KEY, Fernet keys, generated passwords) is longer, while shorter values ("true", a port, a region name,
# a user name in an MCP server's env) are ordinary words that would mask ordinary text, and the separated
# pattern below would start matching prose by chance for values much shorter than this.
MIN_SECRET_CHARS = 12
# What may stand between two characters of a "spelled out" secret: whitespace and punctuation, a few at a time.
_SEPARATOR = r"[\s.,;:|/\\'\"`*+~_\-]{0,3}"


def _spelled(value: str) -> str:
    """A pattern for `value` with up to a few separators between its characters."""
    return _SEPARATOR.join(re.escape(character) for character in value)


def _base64_cores(data: bytes) -> set[str]:
    """The base64 characters fully determined by `data` at each byte alignment (0, 1, 2 bytes before it).

    Character j of an encoding covers bits [6j, 6j+6); with k bytes before `data` the characters from
    ceil(8k/6) to floor(8(k+n)/6) depend on `data` alone, whatever surrounds it.
    """
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode("ascii")
        start, end = -(-8 * offset // 6), 8 * (offset + len(data)) // 6
        core = encoded[start:end]
        cores.add(core)
        cores.add(core.replace("+", "-").replace("/", "_"))
    return cores


def _lower_escapes(value: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda match: match.group(0).lower(), value)


def _variants(secret: str) -> list[str]:
    """Regex alternatives for one secret, longest literal first."""
    data = secret.encode("utf-8")
    escaped = {quote(secret, safe=""), quote_plus(secret, safe="")}
    literals = {data.hex(), data.hex().upper(), *escaped, *(_lower_escapes(value) for value in escaped)}
    literals |= _base64_cores(data)
    literals -= {secret}
    patterns = [re.escape(literal) for literal in sorted(literals, key=len, reverse=True)]
    return [_spelled(secret), _spelled(secret[::-1]), *patterns]


@lru_cache(maxsize=32)
def _pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    alternatives = [variant for secret in secrets for variant in _variants(secret)]
    return re.compile("|".join(alternatives)) if alternatives else None


def redaction_secrets(values: Iterable[str]) -> tuple[str, ...]:
    """The values worth redacting: stripped, long enough, no duplicates, longest first (a secret that contains
    another is masked whole)."""
    kept = {value.strip() for value in values if value and len(value.strip()) >= MIN_SECRET_CHARS}
    return tuple(sorted(kept, key=lambda value: (-len(value), value)))


@dataclass(frozen=True)
class Redacted:
    text: str
    count: int = 0


def redact(text: str, *, secrets: Iterable[str]) -> Redacted:
    """`text` with every secret (and its encodings) replaced by REDACTED, and how many were replaced."""
    pattern = _pattern(redaction_secrets(secrets))
    if pattern is None or not text:
        return Redacted(text=text)
    masked, count = pattern.subn(REDACTED, text)
    return Redacted(text=masked, count=count)


def redacted(text: str, *, secrets: Iterable[str]) -> str:
    return redact(text, secrets=secrets).text


def redacted_json(value: Any, *, secrets: Iterable[str]) -> Any:
    """A decoded JSON value with every string in it redacted (keys too); the structure is kept."""
    if isinstance(value, str):
        return redacted(value, secrets=secrets)
    if isinstance(value, dict):
        return {
            redacted_json(str(key), secrets=secrets): redacted_json(item, secrets=secrets)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redacted_json(item, secrets=secrets) for item in value]
    return value


# What stands for a tool call's arguments that carry a secret no single value shows (split across values, or
# escaped inside a nested serialized value): the whole is withheld, since no part can be shown safely.
ARGUMENTS_WITHHELD = {REDACTED: "the arguments carry a secret across their values; not shown"}
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|\\([\\/\"'])")


def _unescaped(text: str) -> str:
    """`text` with JSON / Python escapes (\\u0073, \\x73, \\/) and URL escapes (%73) decoded, once."""

    def one(match: re.Match[str]) -> str:
        code = match.group(1) or match.group(2)
        return chr(int(code, 16)) if code else match.group(3)

    return unquote(_ESCAPE.sub(one, text))


def _strings(value: Any, *, keys: bool, order: str) -> Iterable[str]:
    """The strings of a decoded JSON value in `order` (document, reversed, sorted by key); with `keys`, the keys
    too, each before its value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        items = list(value.items())
        if order == "sorted":
            items.sort(key=lambda item: str(item[0]))
        elif order == "reversed":
            items.reverse()
        for key, item in items:
            if keys:
                yield str(key)
            yield from _strings(item, keys=keys, order=order)
    elif isinstance(value, list):
        for item in reversed(value) if order == "reversed" else value:
            yield from _strings(item, keys=keys, order=order)


def _nested(text: str) -> Any:
    """A string value that is itself JSON (a serialized structure inside the arguments), decoded; else None."""
    if not text.lstrip().startswith(("{", "[", '"')):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _views(value: Any, *, depth: int = 0) -> Iterator[str]:
    """Every text a reader of the arguments could put together: the strings joined in document, reversed and
    key order (values alone, and keys with values), the serialized form, each string unescaped, and the same of a
    string that is itself serialized JSON (a few levels deep)."""
    for order in ("document", "reversed", "sorted"):
        yield "".join(_strings(value, keys=False, order=order))
    yield "".join(_strings(value, keys=True, order="document"))
    yield json.dumps(value, ensure_ascii=False)
    yield json.dumps(value, ensure_ascii=True)
    for text in _strings(value, keys=True, order="document"):
        yield _unescaped(text)
        nested = _nested(text) if depth < 3 else None
        if nested is not None:
            yield from _views(nested, depth=depth + 1)


def redacted_arguments(value: Any, *, secrets: Iterable[str]) -> Any:
    """A tool call's arguments as they may be stored and shown (an approval card, the API): each string redacted
    (`redacted_json`); when a secret still shows in any view a reader could put together (see `_views`: a secret
    split across values, `{"a": "sk-abc", "b": "def..."}`, or escaped inside a nested serialized value), the
    whole is ARGUMENTS_WITHHELD: a part cannot be shown safely once its neighbours complete it."""
    secrets = redaction_secrets(secrets)
    masked = redacted_json(value, secrets=secrets)
    pattern = _pattern(secrets)
    if pattern is None:
        return masked
    if any(pattern.search(view) for view in _views(masked)):
        return dict(ARGUMENTS_WITHHELD)
    return masked


@dataclass
class RedactionTally:
    """Counts the redactions of one turn across its boundaries (input, tools, reply, errors)."""

    secrets: tuple[str, ...]
    count: int = field(default=0)

    def __call__(self, text: str) -> str:
        result = redact(text, secrets=self.secrets)
        self.count += result.count
        return result.text
