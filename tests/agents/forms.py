"""What the admin's Bot change form posts, for tests that submit it."""

from agents.models import Bot


def bot_admin_form_data(bot: Bot, **changes) -> dict:
    """The Bot form as a person leaves it untouched (secrets blank: kept), with `changes` applied."""
    data = {
        "slug": bot.slug,
        "name": bot.name,
        "owner": bot.owner_id,
        "primary_model": bot.primary_model_id,
        "system_prompt": bot.system_prompt,
        "language": bot.language,
        "is_enabled": "on",
        "group_reply_mode": bot.group_reply_mode,
        "discuss_probe_mode": bot.discuss_probe_mode,
        "discuss_probe_model": bot.discuss_probe_model_id or "",
        "probe_debounce_initial_ms": "",
        "probe_debounce_max_ms": "",
        "feishu_event_mode": bot.feishu_event_mode,
        "feishu_app_id": bot.feishu_app_id,
        "feishu_bot_open_id": bot.feishu_bot_open_id,
        "feishu_app_secret": "",
        "feishu_encrypt_key": "",
        "feishu_verification_token": "",
        "reply_format": bot.reply_format,
        "queue_mode": bot.queue_mode,
        "receipt_emoji": bot.receipt_emoji,
        "failure_emoji": bot.failure_emoji,
        "feishu_owner_open_id": bot.feishu_owner_open_id,
        "dm_policy": bot.dm_policy,
        "dm_open_ids": "\n".join(bot.dm_open_ids),
    }
    data.update(changes)
    return data
