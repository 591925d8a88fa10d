"""What the chat commands answer (K1), in the bot's language: fixed texts, and the `/context show` card built
from the selector's package. Pure: no ORM, no Feishu; the caller renders inside `translation.override`."""

from __future__ import annotations

from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from feishu.commands.permissions import WHO_LISTED, WHO_OWNER, CommandPermission
from feishu.inbound.messages import HELP_TEXT
from threadcontext.trimming import (
    EXCLUDED_CHAR_BUDGET,
    EXCLUDED_CLEARED,
    EXCLUDED_CURRENT_REQUEST,
    EXCLUDED_DUPLICATE,
    EXCLUDED_ITEM_LIMIT,
    EXCLUDED_NOT_IN_MODE,
    EXCLUDED_OWN_OUTPUT,
    EXCLUDED_PIN_OVER_BUDGET,
    EXCLUDED_SLASH_COMMAND,
    EXCLUDED_SUMMARISED,
    EXCLUDED_SUPERSEDED,
    ContextPackage,
    text_preview,
)

HELP_LINES_STEERING = (
    _("- /context show: what my next answer here would carry."),
    _("- /context pin (as a reply to a message), /context unpin (as a reply), /context unpin all, /context pins."),
    _("- /context clear: leave out everything said so far (/context clear all drops the pins too)."),
    _("- /context export: the current context and pins as a Markdown file."),
    _("- /schedule <when> <prompt>, /schedule list, /schedule cancel <n>: a question I answer here on a schedule."),
)
HELP_RESTRICTED = _("/context and /schedule are for %(who)s here.")

REFUSED = _("Only %(who)s may run %(command)s here.")
WHO_THE_OWNER = _("the workspace owner (%(people)s)")
WHO_THE_LIST = _("the people this workspace lists (%(people)s)")
WHO_NOBODY = _("the workspace owner, and none is set")
UNKNOWN_COMMAND = _("I did not understand that command. Send /help for the list.")

SHOW_TITLE = _("**What my next answer here would carry**")
SHOW_TOTALS = _("%(count)s items, %(chars)s of %(max_chars)s characters (at most %(limit)s items).")
SHOW_PINNED = _("Pinned")
SHOW_RECENT = _("Recent")
SHOW_SUMMARY = _("Summary of earlier messages")
SHOW_LEFT_OUT = _("Left out")
SHOW_MORE = _("… and %(count)s more")
SHOW_NOTHING = _("Nothing from this conversation would be carried.")
SHOW_DIRECT = _("A direct chat carries no group context: only this session's own history.")
SHOW_CONTEXT_OFF = _("Shared thread context is off here: only pinned messages are carried.")
SHOW_CHARS = _("%(chars)s chars")

REASON_WORDS = {
    EXCLUDED_CLEARED: _("cleared by /context clear"),
    EXCLUDED_ITEM_LIMIT: _("over the item limit"),
    EXCLUDED_CHAR_BUDGET: _("over the character budget"),
    EXCLUDED_OWN_OUTPUT: _("my own replies (never fed back to me)"),
    EXCLUDED_NOT_IN_MODE: _("not carried in this workspace's mode"),
    EXCLUDED_CURRENT_REQUEST: _("the request itself"),
    EXCLUDED_DUPLICATE: _("already carried as another item"),
    EXCLUDED_PIN_OVER_BUDGET: _("pins beyond the budget (the newest pins win)"),
    EXCLUDED_SLASH_COMMAND: _("a command carries no context"),
    EXCLUDED_SUMMARISED: _("in the summary"),
    EXCLUDED_SUPERSEDED: _("older summaries"),
}

PIN_DONE = _("Pinned: I keep it in view in this conversation.")
PIN_ALREADY = _("That message is already pinned.")
PIN_NOT_FOUND = _("I have no record of that message in this conversation, so I cannot pin it.")
PIN_NEEDS_REPLY = _("Send this as a reply to the message you mean.")
PIN_TOO_MANY = _("This conversation already has %(count)s pins; unpin one first.")
UNPIN_DONE = _("Unpinned.")
UNPIN_NONE = _("That message was not pinned.")
UNPIN_ALL = _("Removed %(count)s pins.")
PINS_NONE = _("Nothing is pinned in this conversation.")
PINS_TITLE = _("Pinned in this conversation (%(count)s):")
CLEAR_DONE = _(
    "Cleared: my next answers here leave out everything said so far (nothing is deleted). "
    "Pins stay; /context clear all removes them too."
)
CLEAR_ALL_DONE = _("Cleared, pins included: my next answers here leave out everything said so far.")

# A card holds 30 KB of JSON: these keep `/context show` one card whatever the thread holds.
SHOW_MAX_LINES = 12
SHOW_PREVIEW_CHARS = 60


def mentions_text(open_ids: tuple[str, ...]) -> str:
    """People as Feishu mentions in a text message (`<at user_id="ou_...">`), so the refusal names them."""
    return ", ".join(f'<at user_id="{open_id}"></at>' for open_id in open_ids)


def who_text(permission: CommandPermission) -> str:
    if permission.who == WHO_OWNER:
        if not permission.open_ids:
            return str(WHO_NOBODY)
        return str(WHO_THE_OWNER) % {"people": mentions_text(permission.open_ids)}
    if permission.who == WHO_LISTED:
        return str(WHO_THE_LIST) % {"people": mentions_text(permission.open_ids)}
    return ""


def help_text(*, permission: CommandPermission) -> str:
    """/help: the commands this sender may run here, and who may run the others."""
    lines = [str(HELP_TEXT)]
    if permission.allowed:
        lines += [str(line) for line in HELP_LINES_STEERING]
    else:
        lines.append(str(HELP_RESTRICTED) % {"who": who_text(permission)})
    return "\n".join(lines)


def refusal_text(*, permission: CommandPermission, command: str) -> str:
    return str(REFUSED) % {"who": who_text(permission), "command": command}


def _type_label(item_type: str) -> str:
    labels = {
        "topic_root": "Topic root",
        "human_message": "Human message",
        "agent_output": "Agent output",
        "summary": "Summary",
    }
    return gettext(labels[item_type]) if item_type in labels else item_type


def _item_line(*, item_id: int, item_type: str, source: str, chars: int, preview: str) -> str:
    size = str(SHOW_CHARS) % {"chars": chars}
    return f"- #{item_id} · {_type_label(item_type)} · {source} · {size}: {text_preview(preview, SHOW_PREVIEW_CHARS)}"


def _capped(lines: list[str]) -> list[str]:
    """At most SHOW_MAX_LINES lines; the rest summarised with a count."""
    if len(lines) <= SHOW_MAX_LINES:
        return lines
    return lines[: SHOW_MAX_LINES - 1] + [str(SHOW_MORE) % {"count": len(lines) - SHOW_MAX_LINES + 1}]


def context_show_markdown(*, package: ContextPackage) -> str:
    """The `/context show` card: the items the next request would carry (pins first), and what is left out, why."""
    diagnostics = package.diagnostics
    lines = [
        str(SHOW_TITLE),
        str(SHOW_TOTALS)
        % {
            "count": len(package.selected),
            "chars": diagnostics.get("context_chars", 0),
            "max_chars": diagnostics.get("max_chars", 0),
            "limit": diagnostics.get("item_limit", 0),
        },
    ]
    pinned = [item for item in package.selected if item.pinned]
    summary = [item for item in package.selected if not item.pinned and item.item_type == "summary"]
    recent = [item for item in package.selected if not item.pinned and item.item_type != "summary"]
    for title, items in ((SHOW_PINNED, pinned), (SHOW_SUMMARY, summary), (SHOW_RECENT, recent)):
        if items:
            lines += ["", f"**{title} ({len(items)})**"]
            lines += _capped(
                [
                    _item_line(
                        item_id=item.id,
                        item_type=item.item_type,
                        source=item.source,
                        chars=item.chars,
                        preview=item.text,
                    )
                    for item in items
                ]
            )
    if diagnostics.get("thread_context_enabled") is False:
        lines += ["", str(SHOW_CONTEXT_OFF)]
    if not package.selected:
        lines += ["", str(SHOW_NOTHING)]
    if package.excluded:
        counts: dict[str, int] = {}
        for excluded in package.excluded:
            counts[excluded.reason] = counts.get(excluded.reason, 0) + 1
        lines += ["", f"**{SHOW_LEFT_OUT} ({len(package.excluded)})**"]
        lines += [f"- {REASON_WORDS.get(reason, reason)}: {count}" for reason, count in sorted(counts.items())]
    return "\n".join(lines)


def pins_list_text(*, pins: list[tuple[int, str, str, str]]) -> str:
    """`/context pins`: (item id, item type, source, text) per pin, oldest first, capped like the show card."""
    if not pins:
        return str(PINS_NONE)
    lines = [str(PINS_TITLE) % {"count": len(pins)}]
    lines += _capped(
        [
            _item_line(item_id=item_id, item_type=item_type, source=source, chars=len(text), preview=text)
            for item_id, item_type, source, text in pins
        ]
    )
    return "\n".join(lines)
