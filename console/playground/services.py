"""The playground's writes: stand-ins kept in step with their hub bots, and messages posted into the real intake.

A message is what Feishu would push to every bot in the group: one `im.message.receive_v1` event per stand-in,
built and signed (and encrypted: every stand-in has an encrypt key) by the bridge's own signer, verified and
stored by the same `webhook_handle` + `captured_event_store` the webhook view and the long connection use. From
there the worker takes over as for any Feishu group: routing, discuss wakes and the probe, turns, deliveries.
"""

import re
import secrets

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from agents.models import Bot
from console.models import MESSAGE_ID_PREFIX, PlaygroundGroup, PlaygroundMember, PlaygroundMessage

# The module, not its names: it is lazy (lark-oapi), and the admin's URLconf imports this module in every process.
from feishu.inbound import webhook as feishu_webhook
from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload
from feishu.simulate import bot_local_credentials_provision
from threadcontext.models import Workspace
from threadcontext.services import workspace_chat_mode_store, workspace_ensure

SANDBOX_SLUG_PREFIX = "playground-"
STAND_IN_SLUG_HEX_BYTES = 8
STAND_IN_SLUG_ATTEMPTS = 3
MAX_TEXT_CHARS = 4000
MAX_SENDER_CHARS = 64
# The hub bot's settings a stand-in copies: what decides how it answers and whether it speaks.
COPIED_FIELDS = (
    "name",
    "owner",
    "primary_model",
    "system_prompt",
    "discuss_probe_mode",
    "discuss_probe_model",
    "probe_debounce_initial_ms",
    "probe_debounce_max_ms",
    "reply_format",
    "receipt_emoji",
    "failure_emoji",
    "language",
)


class PlaygroundInputError(ValueError):
    """What the operator typed cannot be posted (the message says why); nothing was written."""


def stand_in_slug() -> str:
    """A fresh slug for a new stand-in: only a name (the stand-in is found by `sandbox_of`), of a fixed length
    whatever the hub bot's slug, so no two hub bots share one and no slug is too long for the intake."""
    return SANDBOX_SLUG_PREFIX + secrets.token_hex(STAND_IN_SLUG_HEX_BYTES)


def sandbox_bot_sync(*, bot: Bot) -> Bot:
    """The hub bot's stand-in, created on first use and given the hub bot's current settings every time.

    Found by its hub bot's key (issue 30, finding 2): a real bot is never looked up, so never rewritten.
    """
    values = {name: getattr(bot, name) for name in COPIED_FIELDS}
    defaults = {**values, "is_sandbox": True, "is_enabled": True}
    for attempt in range(STAND_IN_SLUG_ATTEMPTS):
        try:
            with transaction.atomic():
                sandbox, _ = Bot.objects.update_or_create(
                    sandbox_of=bot, defaults=defaults, create_defaults={**defaults, "slug": stand_in_slug()}
                )
            break
        except IntegrityError:
            # A real bot already holds the fresh slug (a one in 2^64 draw, or chosen to collide): draw again.
            if attempt == STAND_IN_SLUG_ATTEMPTS - 1:
                raise
    # Local webhook credentials only (a verification token, an encrypt key, an open_id), never an app secret.
    bot_local_credentials_provision(bot=sandbox)
    return sandbox


def playground_members_sync(*, group: PlaygroundGroup) -> list[PlaygroundMember]:
    """Give every member its stand-in and the stand-in's workspace for this chat: the group's kind as its chat
    mode (what im.v1.chat.get would have said) and the member's reply mode as the group's reply policy (G5)."""
    members = list(group.members.select_related("bot", "sandbox_bot"))
    for member in members:
        sandbox = sandbox_bot_sync(bot=member.bot)
        if member.sandbox_bot_id != sandbox.pk:
            member.sandbox_bot = sandbox
            member.save(update_fields=["sandbox_bot"])
        workspace, _ = workspace_ensure(bot_profile=sandbox.slug, chat_id=group.chat_id, name=group.name)
        Workspace.objects.filter(pk=workspace.pk).update(reply_mode=member.reply_mode)
        is_topic = group.kind == PlaygroundGroup.Kind.TOPIC
        # Stored last: it also drops the cached workspace, so routing reads the reply mode just set.
        workspace_chat_mode_store(
            workspace=workspace,
            chat_mode="topic" if is_topic else "group",
            group_message_type="thread" if is_topic else "chat",
        )
    return members


def sender_open_id(name: str) -> str:
    """A stable stand-in open_id per sender name, so the hub sees the same person each time."""
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:24] or "person"
    return f"ou_playground_{slug}"


def playground_message_post(
    *, group: PlaygroundGroup, sender_name: str, text: str, mention_bot_ids: list[int], root_message_id: str = ""
) -> PlaygroundMessage:
    """Post one message as `sender_name` to every bot of the group; @-mentions the members in `mention_bot_ids`.

    In a topic group a message without `root_message_id` opens a topic; with it, it is a message in that topic.
    Raises PlaygroundInputError (and writes nothing) for an empty text, an unknown member or topic.
    """
    sender_name = " ".join(sender_name.split())[:MAX_SENDER_CHARS]
    text = text.strip()
    if not sender_name:
        raise PlaygroundInputError(_("Name the person who writes."))
    if not text or len(text) > MAX_TEXT_CHARS:
        raise PlaygroundInputError(_("Type a message of 1 to %(limit)d characters.") % {"limit": MAX_TEXT_CHARS})
    members = playground_members_sync(group=group)
    if not members:
        raise PlaygroundInputError(_("Add at least one bot to the group first."))
    by_bot = {member.bot_id: member for member in members}
    unknown = [bot_id for bot_id in mention_bot_ids if bot_id not in by_bot]
    if unknown:
        raise PlaygroundInputError(_("Only bots in the group can be @-mentioned."))
    if root_message_id and not group.messages.filter(message_id=root_message_id, root_message_id="").exists():
        raise PlaygroundInputError(_("That topic is not in this group."))
    if root_message_id and group.kind != PlaygroundGroup.Kind.TOPIC:
        raise PlaygroundInputError(_("Only a topic group has topics."))

    message_id = MESSAGE_ID_PREFIX + secrets.token_hex(10)
    topic = (
        {"root_id": root_message_id, "parent_id": root_message_id, "thread_id": f"omt_{root_message_id[-12:]}"}
        if root_message_id
        else {}
    )
    mentioned = [_stand_in(by_bot[bot_id]) for bot_id in dict.fromkeys(mention_bot_ids)]
    mentions = [
        mention_entry(index=index, open_id=bot.feishu_bot_open_id, name=bot.name)
        for index, bot in enumerate(mentioned, start=1)
    ]
    content_text = "".join(f"{mention['key']} " for mention in mentions) + text
    open_id = sender_open_id(sender_name)
    with transaction.atomic():
        message = PlaygroundMessage.objects.create(
            group=group,
            message_id=message_id,
            root_message_id=root_message_id,
            sender_name=sender_name,
            sender_open_id=open_id,
            text=text,
            mentioned_bot_ids=list(dict.fromkeys(mention_bot_ids)),
        )
        for member in members:
            _push(
                bot=_stand_in(member),
                chat_id=group.chat_id,
                message_id=message_id,
                text=content_text,
                sender_open_id=open_id,
                mentions=mentions,
                topic=topic,
            )
    return message


def _stand_in(member: PlaygroundMember) -> Bot:
    """The member's sandbox bot, which playground_members_sync has just set (the column is nullable: SET_NULL)."""
    assert member.sandbox_bot is not None
    return member.sandbox_bot


def _push(
    *, bot: Bot, chat_id: str, message_id: str, text: str, sender_open_id: str, mentions: list, topic: dict
) -> None:
    """One signed, encrypted push into the intake, exactly as the webhook receives it."""
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.bridge_id,
        message_id=message_id,
        chat_id=chat_id,
        text=text,
        sender_open_id=sender_open_id,
        mentions=mentions,
        **topic,
    )
    request = event_request_build(payload=payload, encrypt_key=bot.feishu_encrypt_key)
    outcome = feishu_webhook.webhook_handle(
        bot=bot,
        path=f"/feishu/webhook/{bot.slug}/",
        headers=request.headers,
        body=request.body,
        max_age_seconds=settings.FEISHU_MAX_EVENT_AGE_SECONDS,
    )
    if outcome.event is None or feishu_webhook.captured_event_store(bot=bot, event=outcome.event) is None:
        raise RuntimeError(f"the intake refused a playground event for {bot.slug}: {outcome.status_code}")
