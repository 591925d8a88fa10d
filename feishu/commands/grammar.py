"""The words of a chat command (pure): `/context show`, `/context unpin all`, `/schedule daily 09:00 prompt`...

Command words are English whatever the bot's language; case does not matter; extra spaces do not either.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTEXT_SHOW = "show"
CONTEXT_PIN = "pin"
CONTEXT_UNPIN = "unpin"
CONTEXT_PINS = "pins"
CONTEXT_CLEAR = "clear"
CONTEXT_EXPORT = "export"
CONTEXT_ACTIONS = (CONTEXT_SHOW, CONTEXT_PIN, CONTEXT_UNPIN, CONTEXT_PINS, CONTEXT_CLEAR, CONTEXT_EXPORT)

SCHEDULE_LIST = "list"
SCHEDULE_CANCEL = "cancel"
SCHEDULE_CREATE = "create"


@dataclass(frozen=True)
class ChatCommand:
    """One parsed command: its word (`/context`), its action (`show`), whether `all` followed, and the rest."""

    word: str
    action: str = ""
    is_all: bool = False
    rest: str = ""

    @property
    def is_known(self) -> bool:
        if self.word == "/context":
            return self.action in CONTEXT_ACTIONS
        if self.word == "/schedule":
            return self.action in (SCHEDULE_LIST, SCHEDULE_CANCEL, SCHEDULE_CREATE)
        return self.word in ("/new", "/help")

    @property
    def name(self) -> str:
        """What the purpose of its reply and the logs call it: `/context show`, `/schedule list`..."""
        return f"{self.word} {self.action}".strip()


def chat_command_parse(text: str) -> ChatCommand:
    """The command in a message's text (mention keys already removed); the caller knows it starts with a word
    of SLASH_COMMANDS. An unknown or missing action gives a command whose `is_known` is False (usage reply)."""
    words = text.strip().split()
    word = words[0].lower() if words else ""
    args = words[1:]
    if word == "/context":
        action = args[0].lower() if args else ""
        is_all = len(args) > 1 and args[1].lower() == "all"
        if action in (CONTEXT_UNPIN, CONTEXT_CLEAR) and len(args) > 1 + int(is_all):
            return ChatCommand(word=word, action="")  # trailing words we do not understand: show the usage
        return ChatCommand(word=word, action=action, is_all=is_all)
    if word == "/schedule":
        if not args:
            return ChatCommand(word=word, action=SCHEDULE_CREATE)  # nothing to schedule: the usage answers
        first = args[0].lower()
        if first == SCHEDULE_LIST and len(args) == 1:
            return ChatCommand(word=word, action=SCHEDULE_LIST)
        if first == SCHEDULE_CANCEL:
            return ChatCommand(word=word, action=SCHEDULE_CANCEL, rest=" ".join(args[1:]))
        # the prompt keeps its own lines: the rest of the raw text, not the split words
        return ChatCommand(word=word, action=SCHEDULE_CREATE, rest=text.strip().split(None, 1)[1])
    return ChatCommand(word=word)
