"""Reads of the probe gate: the gate configuration of a bot (cached, P3) and the bots failing closed (P10)."""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.db.models import Count, Max
from django.utils import timezone

from agents.models import Bot, LLMModel, UserProfile
from probe.models import ProbeJudgement
from probe.rules import Cause, Outcome

logger = logging.getLogger(__name__)

SOURCE_CONFIGURED = "configured"
SOURCE_INHERITED = "inherited"

# Causes where the gate does not exist: the caller proceeds as if the feature did not exist (reference §1.6).
UNGATED_CAUSES = frozenset(
    {Cause.MODE_OFF, Cause.NOT_CONFIGURED, Cause.FALLBACK_LOOKUP_FAILED, Cause.INHERITED_MODEL_CANNOT_CALL_TOOLS}
)
# Lookups that failed for a transient reason (the database): never cached, the next wake reads again.
_UNCACHED_CAUSES = frozenset({Cause.CONFIG_UNREADABLE, Cause.FALLBACK_LOOKUP_FAILED})


@dataclass(frozen=True)
class GateConfig:
    """Which judge a bot's gate uses, or why there is none. `cause` is "" when the judge is ready."""

    mode: str
    source: str  # SOURCE_CONFIGURED, SOURCE_INHERITED or "" (mode off)
    model: LLMModel | None
    cause: str = ""
    error: str = ""

    @property
    def gate_ran(self) -> bool:
        return self.cause not in UNGATED_CAUSES


def _cache_key(bot: Bot) -> str:
    # Keyed by the bot's version: a save bumps updated_at, so editing the bot invalidates without a signal.
    # The owner's title model and the model rows are not part of the key: AMUX_PROBE_CONFIG_CACHE_SECONDS
    # bounds how long a change there takes to reach the gate.
    version = bot.updated_at.timestamp() if bot.updated_at else 0
    return f"probe:gate-config:{bot.pk}:{version}:{bot.discuss_probe_mode}:{bot.discuss_probe_model_id}"


def _is_usable(model: LLMModel) -> bool:
    return model.is_enabled and model.provider.is_enabled


def _resolve(bot: Bot) -> GateConfig:
    """Resolution (P2-P4) from the bot row in hand: 0 queries (off), 1 (model), 1 (inherit)."""
    mode = bot.discuss_probe_mode
    if mode == Bot.ProbeMode.OFF:
        return GateConfig(mode=mode, source="", model=None, cause=Cause.MODE_OFF)
    if mode == Bot.ProbeMode.MODEL:
        # The operator's explicit choice: every failure below fails closed (reference rows 1, 4, 5).
        if bot.discuss_probe_model_id is None:
            return GateConfig(
                mode=mode,
                source=SOURCE_CONFIGURED,
                model=None,
                cause=Cause.MODEL_UNRESOLVABLE,
                error="probe mode is 'model' but no probe model is set",
            )
        try:
            model = LLMModel.objects.select_related("provider").filter(pk=bot.discuss_probe_model_id).first()
        except (DatabaseError, ImproperlyConfigured) as exc:
            # ImproperlyConfigured: the provider's stored api key cannot be decrypted (core/fields.py, e.g.
            # FIELD_ENCRYPTION_KEY changed). The judge is chosen and unreadable: fail closed, never cached.
            return GateConfig(
                mode=mode, source=SOURCE_CONFIGURED, model=None, cause=Cause.CONFIG_UNREADABLE, error=str(exc)
            )
        return _check_model(mode=mode, source=SOURCE_CONFIGURED, model=model)
    if mode == Bot.ProbeMode.INHERIT:
        try:
            profile = UserProfile.objects.select_related("title_model__provider").filter(user_id=bot.owner_id).first()
        except DatabaseError as exc:
            # Only "can we fall back to the title model" failed: stay ungated rather than mute a bot whose
            # lookup fails for good (seed review P2a), but at WARN so it is seen.
            return GateConfig(
                mode=mode, source=SOURCE_INHERITED, model=None, cause=Cause.FALLBACK_LOOKUP_FAILED, error=str(exc)
            )
        except ImproperlyConfigured as exc:
            # The read worked and found a title model, but its provider's api key cannot be decrypted: a judge
            # exists and is broken, so this fails closed like an unusable inherited model (the asymmetry kept in
            # _check_model), unlike the ungated database failure above. Not cached (config_unreadable).
            return GateConfig(
                mode=mode, source=SOURCE_INHERITED, model=None, cause=Cause.CONFIG_UNREADABLE, error=str(exc)
            )
        # An owner who never saved a profile has no title model: the gate is simply not configured.
        title_model = profile.title_model if profile is not None else None
        if title_model is None:
            return GateConfig(mode=mode, source=SOURCE_INHERITED, model=None, cause=Cause.NOT_CONFIGURED)
        return _check_model(mode=mode, source=SOURCE_INHERITED, model=title_model)
    # A value outside the choices (written around the admin): an explicit but unreadable setting, fail closed.
    return GateConfig(
        mode=mode, source="", model=None, cause=Cause.CONFIG_UNREADABLE, error=f"unknown probe mode {mode!r}"
    )


def _check_model(*, mode: str, source: str, model: LLMModel | None) -> GateConfig:
    if model is None or not _is_usable(model):
        # Asymmetry kept from the reference (§5.3): an inherited title model that exists but cannot be used
        # (disabled, or its provider disabled) fails closed like an explicit one - a judge was chosen and is
        # broken, which the admin's failing-closed list shows - while an inherited model without tool calls
        # stays ungated (it could never have judged: the gate never existed).
        return GateConfig(
            mode=mode,
            source=source,
            model=model,
            cause=Cause.MODEL_UNRESOLVABLE,
            error="the probe model is missing or disabled, or its provider is disabled",
        )
    if not model.supports_tool_calls:
        cause = (
            Cause.CONFIGURED_MODEL_CANNOT_CALL_TOOLS
            if source == SOURCE_CONFIGURED
            else Cause.INHERITED_MODEL_CANNOT_CALL_TOOLS
        )
        return GateConfig(mode=mode, source=source, model=model, cause=cause)
    return GateConfig(mode=mode, source=source, model=model)


def gate_config_get(*, bot: Bot) -> GateConfig:
    """The bot's gate configuration: 0 queries when cached; uncached 1 query (model or inherit), 0 when off."""
    key = _cache_key(bot)
    config = cache.get(key)
    if config is not None:
        return config
    config = _resolve(bot)
    if config.cause not in _UNCACHED_CAUSES:
        cache.set(key, config, timeout=settings.AMUX_PROBE_CONFIG_CACHE_SECONDS)
    return config


@dataclass(frozen=True)
class FailingBot:
    bot_id: int
    bot_name: str
    cause: str
    count: int
    last_at: datetime


def failing_closed_bots_list(
    *, since: timedelta = timedelta(hours=24), now: datetime | None = None
) -> list[FailingBot]:
    """Bots whose gate failed closed (ran, outcome error / missing / malformed) since, by cause, most first."""
    now = now or timezone.now()
    rows = (
        ProbeJudgement.objects.filter(
            created_at__gte=now - since,
            gate_ran=True,
            outcome__in=[Outcome.ERROR, Outcome.MISSING, Outcome.MALFORMED],
        )
        .values("bot_id", "bot__name", "cause")
        .annotate(count=Count("id"), last_at=Max("created_at"))
        .order_by("-count", "bot_id", "cause")
    )
    return [
        FailingBot(
            bot_id=row["bot_id"],
            bot_name=row["bot__name"],
            cause=row["cause"],
            count=row["count"],
            last_at=row["last_at"],
        )
        for row in rows
    ]


@dataclass(frozen=True)
class MisconfiguredBot:
    bot_id: int
    bot_name: str
    cause: str  # a sentence an operator can act on


def misconfigured_bots_list() -> list[MisconfiguredBot]:
    """Enabled bots that cannot answer as configured, each with its cause (G2: never silently muted).

    A disabled primary model or provider answers nothing anywhere; a discuss bot whose chosen judge cannot run
    fails every wake closed; a discuss bot without a Feishu app hears no group at all.
    """
    rows: list[MisconfiguredBot] = []
    bots = Bot.objects.filter(is_enabled=True).select_related(
        "primary_model__provider", "discuss_probe_model__provider"
    )
    for bot in bots.order_by("name"):
        causes = []
        if not bot.primary_model.is_enabled:
            causes.append(f"its model {bot.primary_model} is disabled")
        elif not bot.primary_model.provider.is_enabled:
            causes.append(f"the provider of its model {bot.primary_model} is disabled")
        if bot.group_reply_mode == Bot.GroupReplyMode.DISCUSS:
            config = gate_config_get(bot=bot)
            if config.cause and config.gate_ran:
                causes.append(f"its discuss judge cannot run ({config.cause}): every wake fails closed")
            if not bot.has_feishu_credentials:
                causes.append("it is in discuss mode but has no Feishu app: it hears no group")
        rows.extend(MisconfiguredBot(bot_id=bot.pk, bot_name=bot.name, cause=cause) for cause in causes)
    return rows
