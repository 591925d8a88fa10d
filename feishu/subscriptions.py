"""Every Feishu event the hub subscribes to and every scope it needs, in one place (issue 23, item 5).

docs/feishu-setup.md lists exactly these (tests/test_docs.py keeps the page, this list and the handlers the
intakes register with lark-oapi equal), so a newcomer who follows the page subscribes to what the code handles.
"""

# Event type -> the scopes Feishu requires before it pushes it (any one of several suffices; the docs name these).
# A message reaches the bot in a DM, when it is @-mentioned in a group, and (discuss mode) for every group
# message: three scopes, one per case. An edit is pushed under the same scopes as the message.
SUBSCRIBED_EVENTS: dict[str, tuple[str, ...]] = {
    "im.message.receive_v1": (
        "im:message.p2p_msg:readonly",
        "im:message.group_at_msg:readonly",
        "im:message.group_msg",
    ),
    "im.message.recalled_v1": ("im:message",),
    "im.message.updated_v1": ("im:message",),  # O6: edits
    "im.chat.member.bot.added_v1": ("im:chat:readonly",),
    "im.chat.member.bot.deleted_v1": ("im:chat:readonly",),
}

# Every scope the hub needs: the events' and those of the APIs it calls (feishu/outbound).
REQUIRED_SCOPES: tuple[str, ...] = (
    "im:message",  # reply, create, get; recalls and edits
    "im:message.p2p_msg:readonly",
    "im:message.group_at_msg:readonly",
    "im:message.group_msg",
    "im:message:readonly",  # catch-up: im.v1.message.list of a group (D2)
    "im:message.reactions:write_only",  # receipt and failure reactions
    "im:resource",  # a message's images and files
    "im:chat:readonly",  # a group's mode; the bot added to or removed from a group
    "cardkit:card:write",  # markdown and streaming cards
)
