"""Outside text made storable once, at the boundary (ARCHITECTURE L3).

Feishu messages, judge output, provider errors and tool output come from outside. Two kinds of character in
them break storage or logging: NUL (PostgreSQL text columns refuse it: DataError) and unpaired UTF-16
surrogates (any UTF-8 encoder refuses them: UnicodeEncodeError, in the driver, a log handler or a JSON dump).
`storable_text` replaces both, so everything downstream may assume clean text; `storable_json` walks a decoded
JSON value and does the same to every string in it, keys included. Nothing else is changed: the text a person
wrote stays as written.
"""

import re
from typing import TYPE_CHECKING, Any

from django.utils.functional import Promise

# A plain str or a lazy translation (gettext_lazy): a verbose name, a label, or a fixed text the bridge renders
# later in a bot's language. The checker knows a lazy translation by django-stubs' str-like promise type; at run
# time it is a Promise.
if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as TranslatableText
else:
    TranslatableText = str | Promise

REPLACEMENT = "\ufffd"
# NUL, and a surrogate code point (U+D800-U+DFFF) standing alone in a Python str (a valid pair never appears as
# two code points in a str decoded from UTF-8 or from JSON, which combines escaped pairs).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_has_surrogate(value: Any) -> bool:
    """Whether a decoded JSON value holds an unpaired surrogate in any string, keys included (a JSON body can carry
    one as an escape, `"\\ud800"`; no UTF-8 text can)."""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(json_has_surrogate(key) or json_has_surrogate(item) for key, item in value.items())
    if isinstance(value, list):
        return any(json_has_surrogate(item) for item in value)
    return False


def storable_text(text: str) -> str:
    """`text` with NUL and unpaired surrogates replaced by U+FFFD; the same object when there is none."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable_json(value: Any) -> Any:
    """A decoded JSON value with `storable_text` applied to every string in it (keys too)."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable_text(str(key)): storable_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable_json(item) for item in value]
    return value
