"""What a bot's Feishu app must have (A8): the scopes, the events and where each credential is found. One list in
code: the bot's setup page shows it, and tests/test_docs.py checks docs/feishu-setup.md against it and against
the calls and registrations the bridge actually makes."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

# The scope each Feishu API family needs (Feishu's "required scopes" of each call; any one listed suffices, the
# docs list the one named here). bot.v3.info needs the Bot capability and no scope.
API_FAMILY_SCOPES: dict[str, tuple[str, ...]] = {
    "im.v1.message": ("im:message",),  # reply, create, and get (quoted and forwarded messages)
    "im.v1.message.list": ("im:message:readonly",),  # catch-up (D2) reads a group's messages since the newest stored
    "im.v1.message_reaction": ("im:message.reactions:write_only",),  # receipt and failure reactions
    "im.v1.message_resource": ("im:resource",),  # images and files of a message, read at turn time
    "im.v1.file": ("im:resource",),  # /context export uploads its Markdown file
    "im.v1.chat": ("im:chat:readonly",),  # a group's mode (topic group or ordinary), read once
    "cardkit.v1.card": ("cardkit:card:write",),  # the streaming card: create, settings
    "cardkit.v1.card_element": ("cardkit:card:write",),  # ... and its content updates
    "bot.v3.info": (),  # the bot's own open_id
    "docx.v1.document": ("docx:document:readonly",),  # a linked document's text (H2)
    "wiki.v2.space": ("wiki:wiki:readonly",),  # ... and which document a linked wiki page is
}
# The scopes an event needs before Feishu pushes it. A message reaches the bot in a DM, when it is @-mentioned in
# a group, and (discuss mode) for every group message: three scopes, one per case.
EVENT_SCOPES: dict[str, tuple[str, ...]] = {
    "im.message.receive_v1": (
        "im:message.p2p_msg:readonly",
        "im:message.group_at_msg:readonly",
        "im:message.group_msg",
    ),
    "im.message.recalled_v1": ("im:message",),
    "im.message.updated_v1": ("im:message",),  # O6: an edit is pushed under the same scope as a recall
    "im.chat.member.bot.added_v1": ("im:chat:readonly",),
    "im.chat.member.bot.deleted_v1": ("im:chat:readonly",),
    "card.action.trigger": (),  # a callback (Callback configuration), no scope of its own: approval buttons (H1)
}

SCOPE_PURPOSES = {
    "im:message": _("send and reply as the bot, read back quoted messages, receive recalls"),
    "im:message.p2p_msg:readonly": _("receive direct messages to the bot"),
    "im:message.group_at_msg:readonly": _("receive group messages that @ the bot"),
    "im:message.group_msg": _("receive group messages that do not @ the bot (discuss mode, thread context)"),
    "im:message:readonly": _("catch up: read a group's messages that arrived while the hub was down"),
    "im:message.reactions:write_only": _("the receipt and failure reactions"),
    "im:resource": _("images and files of a message"),
    "im:chat:readonly": _("a group's mode, and the bot added to or removed from a group"),
    "cardkit:card:write": _("markdown and streaming cards"),
    "docx:document:readonly": _("read the Feishu documents linked in a request"),
    "wiki:wiki:readonly": _("resolve a linked wiki page to its document"),
}
EVENT_PURPOSES = {
    "im.message.receive_v1": _("a message in a DM or a group"),
    "im.message.recalled_v1": _("a recalled message leaves thread context"),
    "im.message.updated_v1": _("an edited message's new text replaces the old in thread context"),
    "im.chat.member.bot.added_v1": _("the bot was added to a group"),
    "im.chat.member.bot.deleted_v1": _("the bot was removed from a group"),
    "card.action.trigger": _("a press on an approval card's button"),
}


@dataclass(frozen=True)
class Credential:
    field: str  # the Bot field it goes into
    label: object  # a lazy translation
    where: object


CREDENTIALS = (
    Credential("feishu_app_id", _("App ID"), _("Developer console ▸ your app ▸ Credentials & Basic Info")),
    Credential("feishu_app_secret", _("App Secret"), _("Developer console ▸ your app ▸ Credentials & Basic Info")),
    Credential(
        "feishu_encrypt_key", _("Encrypt Key"), _("Developer console ▸ Events & Callbacks ▸ Encryption strategy")
    ),
    Credential(
        "feishu_verification_token",
        _("Verification Token"),
        _("Developer console ▸ Events & Callbacks ▸ Encryption strategy"),
    ),
    Credential(
        "feishu_bot_open_id",
        _("Feishu bot open id"),
        _('Leave empty: the hub reads it from Feishu (bot/v3/info); "Verify" shows it'),
    ),
)


def scopes_needed() -> list[str]:
    """Every scope the hub needs, in the order the docs list them, each once."""
    ordered: list[str] = []
    for scopes in (*API_FAMILY_SCOPES.values(), *EVENT_SCOPES.values()):
        ordered.extend(scope for scope in scopes if scope not in ordered)
    return ordered
