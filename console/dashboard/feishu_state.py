"""How a bot stands with Feishu (A6): its credentials as last checked, its long connection, its last event."""

from __future__ import annotations

from agents.models import Bot
from console.dashboard.health import Credentials
from feishu.models import FeishuConnection, FeishuCredentialCheck


def credentials_state(bot: Bot, check: FeishuCredentialCheck | None) -> str:
    """What the last check of the bot's Feishu app found; a check older than the credentials still counts (the
    save that changed them enqueued a new one)."""
    if not bot.has_feishu_credentials:
        return Credentials.MISSING
    if check is None:
        return Credentials.UNVERIFIED
    return Credentials.OK if check.ok else Credentials.REFUSED


LIVE_CONNECTION = (FeishuConnection.State.CONNECTED, FeishuConnection.State.CONNECTING)


def connection_down(bot: Bot, connection: FeishuConnection | None) -> bool:
    """A long-connection bot (with an app) whose connection is not up: it hears nothing."""
    if bot.feishu_event_mode != Bot.FeishuEventMode.LONG_CONNECTION or not bot.has_feishu_credentials:
        return False
    return connection is None or connection.state not in LIVE_CONNECTION
