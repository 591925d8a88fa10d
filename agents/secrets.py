"""Every secret the hub holds, gathered for the one redaction step (core.redaction, issue 30).

A reply, a prompt, a tool's output or an error text may carry any of them, whichever bot the text belongs to: a
model given one bot's tools can echo another bot's key, and a stdio MCP server can read the hub's own
environment. So the set is the hub's, not the bot's: Django's SECRET_KEY and the field-encryption keys, the
passwords in the database and Redis URLs, every provider key, every bot's Feishu secrets, every MCP server's
environment and header values.
"""

import json
import time
from collections.abc import Iterable, Iterator
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.db.models import F

from agents.models import Bot, McpServer, Provider, Turn
from core.redaction import RedactionTally, redacted, redaction_secrets
from core.text import storable_text


def _url_password(url: str) -> str:
    try:
        return unquote(urlsplit(url).password or "")
    except ValueError:
        return ""


def _settings_secrets() -> Iterator[str]:
    yield str(settings.SECRET_KEY or "")
    yield from (str(key) for key in getattr(settings, "FIELD_ENCRYPTION_KEY", ()) or ())
    for database in settings.DATABASES.values():
        yield str(database.get("PASSWORD") or "")
    for name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        yield _url_password(str(getattr(settings, name, "") or ""))


def _json_values(raw: str) -> Iterator[str]:
    """The values of a stored JSON object (an MCP server's environment or headers); nothing when it is not one."""
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return
    if not isinstance(value, dict):
        return
    for item in value.values():
        yield str(item)
        # A header "Bearer <token>": the token alone is the secret when the model echoes only it.
        yield from str(item).split()[1:]


def _stored_secrets() -> Iterator[str]:
    yield from Provider.objects.values_list("api_key", flat=True)
    for app_secret, encrypt_key, token in Bot.objects.values_list(
        "feishu_app_secret", "feishu_encrypt_key", "feishu_verification_token"
    ):
        yield from (app_secret, encrypt_key, token)
    for environment, headers in McpServer.objects.values_list("environment", "headers"):
        yield from _json_values(environment)
        yield from _json_values(headers)


# The stored secrets are read at most this often per process (three queries; a turn redacts at several
# boundaries and routing at every event). Kept in this process's memory only, never in a shared cache. A secret
# saved in another process is known here within this many seconds; one saved here at once (hub_secrets_forget).
HUB_SECRETS_TTL_SECONDS = 10.0
_cached: dict[str, tuple[float, tuple[str, ...]]] = {}


def hub_secrets_forget() -> None:
    _cached.clear()


def hub_secrets(*, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """Every secret worth redacting (long enough to be unambiguous), longest first."""
    now = time.monotonic()
    read_at, stored = _cached.get("stored", (0.0, ()))
    if not read_at or now - read_at > HUB_SECRETS_TTL_SECONDS:
        stored = tuple(_stored_secrets())
        _cached["stored"] = (now, stored)
    return redaction_secrets([*_settings_secrets(), *stored, *extra])


def upstream_error_redacted(text: str, *, extra: Iterable[str] = (), max_chars: int = 0) -> str:
    """An error text from outside the hub (Feishu's answer, an SDK's exception, a provider's refusal) as it may be
    stored and shown: every hub secret and `extra` redacted, made storable, then cut to `max_chars` (0: uncut).

    The one step for every stored upstream error (Verify, voice transcription, document reads, deliveries, the
    catch-up): Feishu quotes what it refused, the app secret included. `extra` is the caller's own secrets (a
    bot's `feishu_secrets`), which may be newer than the cached set. Redaction runs before the cut: a secret near
    the cut would survive in part.
    """
    text = redacted(storable_text(str(text)), secrets=hub_secrets(extra=extra))
    return text[:max_chars] if max_chars else text


def hub_redaction_tally() -> RedactionTally:
    return RedactionTally(secrets=hub_secrets())


def turn_redactions_add(*, turn_id: int, count: int) -> None:
    """Count `count` more redactions on the turn (shown in its admin page and the turns API)."""
    if count:
        Turn.objects.filter(pk=turn_id).update(redaction_count=F("redaction_count") + count)
