"""Every JSON body is parsed with a bounded nesting depth before anything else touches it.

Python's json module recurses once per level: a 2 KB body nested 1,000 deep (`[[[...]]]`) raises RecursionError
in json.loads, and one nested 900 deep decodes but breaks the next recursive walk (storable_json, a serializer,
a log formatter) with a traceback. No request we accept is nested more than a few levels, so a body deeper than
MAX_JSON_DEPTH is refused before it is decoded: the depth is counted by one regular-expression pass over the
text (strings are matched whole, so brackets inside them do not count), which has no recursion to exhaust.

`json_loads_bounded` is the one parse for the webhook and the long connection; `BoundedJSONParser` is DRF's
JSONParser on top of it (settings DEFAULT_PARSER_CLASSES). Their errors, like WordedMultiPartParser's, are
sentences of ours: a decoder's exception text never reaches a client.

A REST body with an unpaired surrogate (`"\\ud800"`, the only way one reaches the API: query strings, forms and
multipart are decoded with replacement) is refused here, for every field at once: a serializer field that echoes
its input in an error (a ChoiceField's "... is not a valid choice") made the JSON renderer fail with a 500.
"""

import codecs
import json
import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.settings import api_settings

from core.text import json_has_surrogate

MAX_JSON_DEPTH = 64
SURROGATE_REFUSED = (
    "The body holds an unpaired surrogate escape (such as \\ud800): every text in it must be valid Unicode."
)

# A whole JSON string (escapes included), or one bracket. An unterminated string matches nothing and its
# brackets are counted: the text is not JSON then, and json.loads refuses it anyway.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPENING = frozenset("[{")


class JsonTooDeepError(ValueError):
    """The text nests arrays/objects deeper than MAX_JSON_DEPTH (a ValueError, like any other undecodable body)."""

    def __init__(self, max_depth: int) -> None:
        super().__init__(f"JSON nested deeper than {max_depth} levels.")
        self.max_depth = max_depth


def json_depth_exceeds(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """True when `text` opens more than `max_depth` arrays/objects inside each other (pure, no recursion)."""
    if text.count("[") + text.count("{") <= max_depth:
        return False  # the common case costs two C-level scans
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in _OPENING:
            depth += 1
            if depth > max_depth:
                return True
        elif token in "]}":
            depth -= 1
    return False


def json_loads_bounded(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH, **kwargs: Any) -> Any:
    """json.loads, refusing text nested deeper than `max_depth` with JsonTooDeepError before decoding it.

    Raises ValueError (JSONDecodeError, UnicodeDecodeError or JsonTooDeepError) for anything that is not
    acceptable JSON, never RecursionError.
    """
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    if json_depth_exceeds(text, max_depth=max_depth):
        raise JsonTooDeepError(max_depth)
    return json.loads(text, **kwargs)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON.")


class BoundedJSONParser(JSONParser):
    """DRF's JSONParser with the depth bound; errors are sentences, never the decoder's exception text."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            raw = stream.read() if stream is not None else b""
            text = codecs.decode(raw, encoding)
        except (UnicodeDecodeError, LookupError) as error:
            raise ParseError(f"The body is not valid {encoding} text.") from error
        if json_depth_exceeds(text):
            raise ParseError(f"The JSON body is nested deeper than {MAX_JSON_DEPTH} levels.")
        try:
            data = json.loads(text, parse_constant=_refuse_constant if api_settings.STRICT_JSON else None)
        except ValueError as error:
            raise ParseError("The body is not valid JSON.") from error
        if json_has_surrogate(data):
            raise ParseError(SURROGATE_REFUSED)
        return data


class WordedMultiPartParser(MultiPartParser):
    """DRF's MultiPartParser, whose error quotes Django's exception ("... - Invalid boundary in multipart: None")."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except ParseError as error:
            raise ParseError("The body is not valid multipart/form-data (check its boundary and parts).") from error
