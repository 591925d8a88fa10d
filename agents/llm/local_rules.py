"""`local_rules`: an offline, deterministic, rule-based provider for the embedded default, demos and tests.

It is not a language model and says so in every answer a person can see:
- as an agent it echoes what it received: "[local_rules · rule-based echo] I received 3 context messages; you
  said: …", so a demo shows which context a turn assembled. "You said" is the person's own request: the bridge's
  prompt scaffolding (the `[Amux Feishu …]` wrappers around the user request) and the discuss activation contract
  (a user message the hub adds, not the person) are never echoed back;
- as a judge (a forced `decide` tool call, the probe's request) it answers `send` when the newest message
  addresses the bot by name, is a question, or replies to the bot (the message before it is the bot's own),
  and `no_action` otherwise, with a reason starting "rule-based:".

The bot's name is read from the system prompt: "The bot: Name." (the probe's judge prompt), 'You are "Name"',
'You are named Name' or 'Bot name: Name'.

`stream` gives the same answer as `complete`, word by word, pausing `AMUX_LOCAL_RULES_STREAM_DELAY_MS` between
words (0 in tests) so a demo on the embedded default shows the answer being written.
"""

import re
import time
from collections.abc import Callable

from agents.llm.base import ChatMessage, CompletionRequest, CompletionResult, ToolCall, Usage
from agents.llm.settings import ProviderSettings
from agents.llm.streaming import word_pieces

ECHO_LABEL = "[local_rules · rule-based echo]"
MAX_ECHO_CHARS = 2000
DECIDE_TOOL = "decide"

NAME_PATTERNS = (
    # The probe's judge prompt: "The bot: Name." (probe/prompts.py)
    re.compile(r"^\s*(?:the bot|bot name|your name)\s*[:：]\s*(.+?)\.?\s*$", re.IGNORECASE | re.MULTILINE),
    re.compile(r"""you are\s+["“'「]([^"”'」\n]{1,64})["”'」]""", re.IGNORECASE),
    re.compile(r"you are\s+(?:a bot |an assistant )?(?:named|called)\s+@?([^\s,.;:!?\n]{1,64})", re.IGNORECASE),
)
QUESTION_WORDS = (
    "what", "why", "how", "who", "whom", "whose", "when", "where", "which", "can", "could", "would", "should",
    "is", "are", "do", "does", "did", "will", "may", "shall",
)  # fmt: skip
# The labels after which the bridge's renderer puts the person's own words (threadcontext/rendering.py; agents
# does not import threadcontext, so they are restated here and a test renders real prompts against them).
REQUEST_LABELS = ("[User request]", "[Conversation input]")
# The first line of the discuss activation contract (probe/prompts.py), the hub's message, not the person's.
ACTIVATION_HEADER = "[Discuss wake-up: activation]"
QUESTION_ENDINGS = ("?", "？", "吗", "呢", "么")
QUESTION_MARKERS_ZH = ("什么", "怎么", "为什么", "哪", "谁", "能不能", "是不是", "可以吗")


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def bot_name_from(messages: tuple[ChatMessage, ...]) -> str:
    system = "\n".join(message.content for message in messages if message.role == "system")
    for pattern in NAME_PATTERNS:
        match = pattern.search(system)
        if match:
            return match.group(1).strip()
    return ""


def newest_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def request_text(content: str) -> str:
    """The person's words in a rendered prompt: what follows the innermost request label, else the whole text."""
    lines = content.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].strip() in REQUEST_LABELS:
            return "\n".join(lines[index + 1 :]).strip()
    return content.strip()


# Where a rendered prompt lists the conversation around the request, one line each (threadcontext.rendering's
# thread context block; a discuss turn's transcript, feishu.channel.discuss_context): the echo counts those lines.
CONTEXT_BLOCK_LABELS = ("[Feishu thread context]", "[The conversation that woke you, oldest first]")


def context_items_count(content: str) -> int:
    """The lines of every context block in a rendered prompt (a block ends at the next bracketed label)."""
    count, inside = 0, False
    for line in content.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            inside = stripped in CONTEXT_BLOCK_LABELS
        elif inside and stripped:
            count += 1
    return count


def is_activation_contract(content: str) -> bool:
    return content.lstrip().startswith(ACTIVATION_HEADER)


def is_question(text: str) -> bool:
    stripped = text.strip().rstrip("。.!！ ")
    if not stripped:
        return False
    if stripped.endswith(QUESTION_ENDINGS) or "?" in stripped or "？" in stripped:
        return True
    # "Alice: how do I…" — look past a speaker prefix for the first word.
    body = stripped.split(":", 1)[1] if re.match(r"^[^\s:]{1,40}:\s", stripped) else stripped
    first_word = re.split(r"[\s,]+", body.strip().lower(), maxsplit=1)[0]
    return first_word in QUESTION_WORDS or any(marker in body for marker in QUESTION_MARKERS_ZH)


def is_addressed(text: str, *, bot_name: str) -> bool:
    if not bot_name:
        return False
    return re.search(rf"(?<![\w]){re.escape(bot_name)}(?![\w])", text, re.IGNORECASE) is not None


def judge_verdict(*, bot_name: str, newest_text: str, replies_to_bot: bool) -> tuple[str, str]:
    """The rule-based judge as a pure function: (should_act, reason)."""
    if is_addressed(newest_text, bot_name=bot_name):
        return "send", f"rule-based: the newest message addresses {bot_name} by name"
    if replies_to_bot:
        return "send", "rule-based: the newest message replies to the bot"
    if is_question(newest_text):
        return "send", "rule-based: the newest message is a question"
    return "no_action", "rule-based: not addressed by name, not a question, not a reply to the bot"


class LocalRulesClient:
    def __init__(self, settings: ProviderSettings | None = None) -> None:
        self.settings = settings

    def request_body(self, request: CompletionRequest) -> dict:
        return {
            "model": request.model,
            "messages": [{"role": message.role, "content": message.content} for message in request.messages],
            "tools": [tool.name for tool in request.tools],
            "forced_tool": request.forced_tool,
        }

    def stream(self, request: CompletionRequest, *, on_text: Callable[[str], None]) -> CompletionResult:
        """The echo word by word, so a demo on the embedded default shows a streamed answer being written."""
        result = self.complete(request)
        delay = self.settings.stream_word_delay_seconds if self.settings else 0.0
        for number, piece in enumerate(word_pieces(result.text)):
            if delay and number:
                time.sleep(delay)
            on_text(piece)
        return result

    def complete(self, request: CompletionRequest) -> CompletionResult:
        input_tokens = sum(estimate_tokens(message.content) for message in request.messages)
        conversation = [message for message in request.messages if message.role != "system"]
        if not request.forced_tool:  # the agent echoes the person, not the hub's activation contract (P9)
            conversation = [
                message
                for message in conversation
                if not (message.role == "user" and is_activation_contract(message.content))
            ]
        last_user_index = max((i for i, message in enumerate(conversation) if message.role == "user"), default=-1)
        newest = conversation[last_user_index].content if last_user_index >= 0 else ""
        if request.forced_tool:
            replies_to_bot = last_user_index > 0 and conversation[last_user_index - 1].role == "assistant"
            if request.forced_tool.lower() == DECIDE_TOOL:
                should_act, reason = judge_verdict(
                    bot_name=bot_name_from(request.messages),
                    newest_text=newest_line(newest),
                    replies_to_bot=replies_to_bot,
                )
                arguments: dict = {"should_act": should_act, "reason": reason}
            else:
                arguments = {}
            call = ToolCall(name=request.forced_tool, arguments=arguments, id="local_rules_call_1")
            return CompletionResult(
                text="",
                tool_calls=(call,),
                usage=Usage(input_tokens=input_tokens, output_tokens=estimate_tokens(str(arguments))),
                raw_finish_reason="tool_calls",
            )
        context_count = max(last_user_index, 0)
        said = " ".join(request_text(newest).split())
        text = f"{ECHO_LABEL} I received {context_count} context message{'s' if context_count != 1 else ''}"
        items = context_items_count(newest)
        if items:  # the thread context items (or discuss transcript lines) inside the request itself
            text += f" and {items} thread context item{'s' if items != 1 else ''}"
        text += f"; you said: {said}" if said else "; there was no user message."
        if len(text) > MAX_ECHO_CHARS:
            text = text[: MAX_ECHO_CHARS - 1] + "…"
        return CompletionResult(
            text=text,
            usage=Usage(input_tokens=input_tokens, output_tokens=estimate_tokens(text)),
            raw_finish_reason="stop",
        )
