"""The Feishu setup page of a bot (A8): its event URL with what is wrong with it, the manifest, its last events."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest
from django.urls import reverse
from django.utils.translation import gettext as _

from agents.models import Bot
from feishu.manifest import CREDENTIALS, EVENT_PURPOSES, EVENT_SCOPES, SCOPE_PURPOSES, scopes_needed
from feishu.models import FeishuConnection, FeishuCredentialCheck, InboundEvent

LAST_EVENTS = 10
PRIVATE_SUFFIXES = (".local", ".internal", ".lan", ".localhost")


def event_url_warnings(url: str) -> list[str]:
    """Why Feishu could not reach `url`, in sentences; none for a public HTTPS address."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    warnings = []
    if parts.scheme != "https":
        warnings.append(
            _("Feishu posts events only to an HTTPS address; this one is %(scheme)s.") % {"scheme": parts.scheme}
        )
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        private = host == "localhost" or host.endswith(PRIVATE_SUFFIXES) or "." not in host
    else:
        private = address.is_private or address.is_loopback or address.is_link_local or address.is_reserved
    if private:
        warnings.append(
            _(
                "%(host)s is not reachable from the internet: Feishu cannot post to it. Set AMUX_PUBLIC_BASE_URL to the "
                "hub's public address, or use the long connection."
            )
            % {"host": host}
        )
    return warnings


def event_url(*, bot: Bot, request: HttpRequest) -> str:
    """The bot's webhook address: from the public base URL setting, else from this request's host."""
    path = reverse("feishu:webhook", args=[bot.slug])
    base = settings.AMUX_PUBLIC_BASE_URL.rstrip("/")
    return f"{base}{path}" if base else request.build_absolute_uri(path)


@dataclass
class BotSetup:
    event_url: str
    event_url_from_setting: bool
    warnings: list[str]
    credentials: list[tuple[str, str, str, bool]]  # (field, label, where to find it, set)
    scopes: list[tuple[str, str]]
    events: list[tuple[str, str, tuple[str, ...]]]
    check: FeishuCredentialCheck | None
    connection: FeishuConnection | None
    last_events: list[InboundEvent]


def bot_setup_get(*, bot: Bot, request: HttpRequest) -> BotSetup:
    url = event_url(bot=bot, request=request)
    return BotSetup(
        event_url=url,
        event_url_from_setting=bool(settings.AMUX_PUBLIC_BASE_URL),
        warnings=event_url_warnings(url),
        credentials=[
            (item.field, str(item.label), str(item.where), bool(getattr(bot, item.field))) for item in CREDENTIALS
        ],
        scopes=[(scope, str(SCOPE_PURPOSES[scope])) for scope in scopes_needed()],
        events=[(event, str(EVENT_PURPOSES[event]), scopes) for event, scopes in EVENT_SCOPES.items()],
        check=FeishuCredentialCheck.objects.filter(bot=bot).first(),
        connection=FeishuConnection.objects.filter(bot=bot).first(),
        last_events=list(InboundEvent.objects.filter(bot=bot).order_by("-received_at", "-pk")[:LAST_EVENTS]),
    )
