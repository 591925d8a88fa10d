"""Which bot a webhook URL names, cached per process (issue 11: the bot row is read at most once per
BOT_CACHE_SECONDS). Apart from the webhook module so that a save can drop the cache without loading lark-oapi."""

import time

from agents.models import Bot

# slug -> (monotonic expiry, Bot): the webhook reads the bot row at most once per BOT_CACHE_SECONDS per process.
_bots: dict[str, tuple[float, Bot]] = {}
BOT_CACHE_SECONDS = 5.0


def webhook_bot_get(*, slug: str, now: float | None = None) -> Bot | None:
    """The enabled bot for a webhook URL, read at most once per BOT_CACHE_SECONDS per worker process.

    A save of the bot in this process drops the entry at once (`bot_cache_forget` on post_save); in another
    worker a credentials change or a disable takes effect within BOT_CACHE_SECONDS. The handler cache is keyed
    on the bot's updated_at, so a refreshed row with new credentials gets a new handler.
    """
    now = time.monotonic() if now is None else now
    cached = _bots.get(slug)
    if cached is not None and cached[0] > now:
        return cached[1]
    bot = Bot.objects.filter(slug=slug, is_enabled=True).first()
    if bot is None:
        _bots.pop(slug, None)  # unknown and disabled bots are not cached: enabling one works at once
        return None
    _bots[slug] = (now + BOT_CACHE_SECONDS, bot)
    return bot


def bot_cache_forget(*, bot_pk: int, slug: str = "") -> None:
    """Drop a bot from this process's webhook cache under its old and new slugs (post_save / post_delete)."""
    _bots.pop(slug, None)  # also a deleted bot's successor with the same slug
    for cached_slug, (_, bot) in list(_bots.items()):
        if bot.pk == bot_pk:
            _bots.pop(cached_slug, None)
