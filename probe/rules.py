"""Pure rules of the discuss probe gate: constants, the judge's budget and window, the request, the verdict.

No ORM and no settings here, so every rule is tested without a database (STYLE: pure logic in plain
functions). The numbers and the parsing follow seed 003's final code (reference §1.1-1.5), see ARCHITECTURE P5-P7.
"""

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agents.llm.base import ChatMessage, CompletionRequest, ToolCall, ToolSpec
from probe.prompts import judge_system_prompt

# --- Constants (reference §1.1) ---------------------------------------------------------------------------
PROBE_TIMEOUT_SECONDS = 45.0
PROBE_MAX_OUTPUT_TOKENS = 2048  # the judge's completion cap, also reserved as output in the budget
PROBE_CONTEXT_MAX_TOKENS = 16384  # hard cap on the judge's input window
PROBE_PROMPT_OVERHEAD_TOKENS = 1024  # the system prompt and the decide schema
PROBE_CONTEXT_FLOOR_TOKENS = 2048  # the smallest input worth sending; below it the request is refused
PROBE_FALLBACK_WINDOW = 8192  # assumed context window of a model that declares none
BYTES_PER_TOKEN = 4
TRUNCATION_SEPARATOR = "\n…\n"

DECIDE_TOOL_NAME = "decide"
SHOULD_ACT_SEND = "send"
SHOULD_ACT_NO_ACTION = "no_action"


class Outcome:
    """Outcomes in logs and ProbeJudgement rows; `disabled` is the outcome of every ungated exit."""

    ACT = "act"
    NO_ACTION = "no_action"
    MISSING = "missing"
    MALFORMED = "malformed"
    ERROR = "error"
    DISABLED = "disabled"


class Cause:
    """Why the gate exited (reference §1.6 exit table, plus MODE_OFF for our explicit "off" mode)."""

    MODE_OFF = "mode_off"
    CONFIG_UNREADABLE = "config_unreadable"
    FALLBACK_LOOKUP_FAILED = "fallback_lookup_failed"
    NOT_CONFIGURED = "not_configured"
    MODEL_UNRESOLVABLE = "model_unresolvable"
    CONFIGURED_MODEL_CANNOT_CALL_TOOLS = "configured_model_cannot_call_tools"
    INHERITED_MODEL_CANNOT_CALL_TOOLS = "inherited_model_cannot_call_tools"
    MODEL_WINDOW_TOO_SMALL = "model_window_too_small"
    NO_VALID_WINDOW = "no_valid_window"
    CREDENTIALS_UNRESOLVABLE = "credentials_unresolvable"
    MODEL_CALL_FAILED = "model_call_failed"
    JUDGED = "judged"


# Quiet causes: deliberate configuration, not an anomaly. Everything else that is shut or abnormal is a WARN (P8).
QUIET_CAUSES = frozenset({Cause.NOT_CONFIGURED, Cause.MODE_OFF})

# --- The decide tool (reference §1.3; strict-mode compatible schema from the wire doc §5) --------------------
DECIDE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "should_act": {
            "type": "string",
            "enum": [SHOULD_ACT_SEND, SHOULD_ACT_NO_ACTION],
            "description": (
                "send: the bot acts on this wake-up, and the action must include at least one message. "
                "no_action: the bot stays silent and the wake-up does not run."
            ),
        },
        "reason": {
            "type": "string",
            "description": (
                "A brief justification. With send it is forwarded to the bot as advisory notes on what to say "
                "or do first; with no_action, why silence is right."
            ),
        },
    },
    "required": ["should_act", "reason"],
    "additionalProperties": False,
}
DECIDE_TOOL = ToolSpec(
    name=DECIDE_TOOL_NAME,
    description="Report your judgement on whether the bot should act right now. This is your only output.",
    parameters=DECIDE_PARAMETERS,
)


# --- Budget (P5, reference §1.5) ----------------------------------------------------------------------------
def context_budget(*, window: int) -> int | None:
    """Input tokens the judge may see, or None when the model's window cannot hold a minimal request.

    Output, overhead and input are all reserved inside the window: 8192 → 5120, 4097 → None, 0 → 5120
    (undeclared falls back to 8192), 128000 → 16384.
    """
    if window <= 0:
        window = PROBE_FALLBACK_WINDOW
    available = window - PROBE_MAX_OUTPUT_TOKENS - PROBE_PROMPT_OVERHEAD_TOKENS
    if available < PROBE_CONTEXT_FLOOR_TOKENS:
        return None
    return min(available, PROBE_CONTEXT_MAX_TOKENS)


def is_structured(message: ChatMessage) -> bool:
    """A message carrying a tool payload cannot be cut without producing a malformed request."""
    return bool(message.tool_calls) or bool(message.tool_call_id)


def message_tokens(message: ChatMessage) -> int:
    """The seed's estimate: bytes / 4 of what is sent (content, plus the tool calls' arguments)."""
    size = len(message.content.encode("utf-8"))
    for call in message.tool_calls:
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        size += len(call.name.encode("utf-8")) + len(arguments.encode("utf-8"))
    return -(-size // BYTES_PER_TOKEN)


def _is_tool_result(message: ChatMessage) -> bool:
    return str(message.role).strip().lower() == "tool"


def admit_window(*, messages: list[ChatMessage], budget: int) -> list[ChatMessage]:
    """The judge's window: the newest contiguous suffix that fits (P5). Empty means `no_valid_window`.

    No summary is pinned: whether to speak now depends on the tail, not on the thread's history. The window
    never opens on a tool result (its call was cut off). A lone oversized newest message is cut to 2/3 head +
    1/3 tail in characters (one character counted as one token, conservative against bytes/4); a structured
    payload cannot be cut.
    """
    if not messages or budget <= 0:
        return []
    start = len(messages) - 1
    used = message_tokens(messages[start])
    while start > 0:
        cost = message_tokens(messages[start - 1])
        if used + cost > budget:
            break
        used += cost
        start -= 1
    while start < len(messages) and _is_tool_result(messages[start]):
        start += 1
    window = list(messages[start:])
    if not window:
        return []
    if len(window) == 1 and message_tokens(window[0]) > budget:
        only = window[0]
        if is_structured(only):
            return []
        if len(only.content) > budget:
            head = budget * 2 // 3
            tail = budget - head
            cut = only.content[:head] + TRUNCATION_SEPARATOR + (only.content[-tail:] if tail else "")
            window = [ChatMessage(role=only.role, content=cut)]
    return window


# --- Since the last verdict (issue 11, discuss cost) ---------------------------------------------------------
# A burst in a busy group is a handful of messages, and the judge used to see the whole transcript (40 items)
# on every probe: the same history paid for again and again. It now sees what arrived since its last verdict in
# the topic plus a tail of messages it already judged, what the new ones answer or refer to: the judge always
# has at least PROBE_SEEN_TAIL_MESSAGES in view (all of them seen when nothing is new), and never fewer than
# PROBE_SEEN_TAIL_MIN_MESSAGES seen ones. A burst brings its own context, so its tail shrinks (issue 11: the
# debounced bench probe carried 7.5 new messages and 6 seen ones). The bot's own reply since the verdict is new,
# never cut: the verdict's mark was taken before the bot spoke.
PROBE_SEEN_TAIL_MESSAGES = 6
PROBE_SEEN_TAIL_MIN_MESSAGES = 2
# The newest messages a verdict saw, digested in order: where the next probe's new messages start. Three, so an
# "ok" repeated later is not taken for the place the last verdict stopped.
PROBE_SEEN_MARK_MESSAGES = 3


def seen_mark(*, messages: list[ChatMessage]) -> str:
    """The digest of the newest messages a verdict was given on ("" for none)."""
    if not messages:
        return ""
    digest = hashlib.sha256()
    for message in messages[-PROBE_SEEN_MARK_MESSAGES:]:
        digest.update(f"{message.role}\0{message.content}\0".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def seen_tail_length(
    *, new: int, tail: int = PROBE_SEEN_TAIL_MESSAGES, least: int = PROBE_SEEN_TAIL_MIN_MESSAGES
) -> int:
    """How many already judged messages go before `new` new ones: enough for `tail` in view, at least `least`."""
    return max(min(least, tail), tail - new)


def since_last_verdict(
    *,
    messages: list[ChatMessage],
    mark: str,
    tail: int = PROBE_SEEN_TAIL_MESSAGES,
    least: int = PROBE_SEEN_TAIL_MIN_MESSAGES,
) -> list[ChatMessage]:
    """The messages new since the verdict that left `mark`, after a tail of those it had seen (seen_tail_length).

    The mark is looked for from the newest end, so the newest place it matches is where the last verdict
    stopped. No mark, or a mark no longer in the transcript (more new messages than the transcript holds, or the
    record expired): every message, as before. Always a contiguous suffix, so admit_window's rules (P5) apply
    unchanged to what is left.
    """
    if not mark:
        return messages
    for end in range(len(messages), 0, -1):
        if seen_mark(messages=messages[:end]) == mark:
            kept = seen_tail_length(new=len(messages) - end, tail=tail, least=least)
            return messages[max(0, end - kept) :]
    return messages


# --- The request (P6): the ONE builder production and tests use ---------------------------------------------
def judge_request_build(*, model_name: str, bot_name: str, window: list[ChatMessage]) -> CompletionRequest:
    """The judge's completion request: system prompt, the admitted window, the single forced `decide` tool."""
    system = ChatMessage(role="system", content=judge_system_prompt(bot_name=bot_name))
    return CompletionRequest(
        model=model_name,
        messages=(system, *window),
        tools=(DECIDE_TOOL,),
        forced_tool=DECIDE_TOOL_NAME,
        max_output_tokens=PROBE_MAX_OUTPUT_TOKENS,
    )


# --- The verdict (P7, reference §1.4) -----------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    should_act: str  # "send", "no_action" or "" when missing / malformed
    reason: str
    outcome: str  # Outcome.ACT / NO_ACTION / MISSING / MALFORMED

    @property
    def activated(self) -> bool:
        return self.should_act == SHOULD_ACT_SEND


def verdict_parse(*, tool_calls: tuple[ToolCall, ...] | list[ToolCall]) -> Verdict:
    """Strict parsing: the first `decide` call (name case-insensitive) decides; values are case-sensitive.

    A missing or null field, a field of the wrong type, input that is not an object, or an unknown value is
    `malformed`; no decide call at all is `missing`. Only `send` activates.
    """
    for call in tool_calls:
        if call.name.strip().lower() != DECIDE_TOOL_NAME:
            continue
        arguments = call.arguments
        # Adapters pass the raw string when the arguments did not parse as JSON: never an object, so malformed.
        if not isinstance(arguments, dict):
            return Verdict(should_act="", reason="", outcome=Outcome.MALFORMED)
        should_act = arguments.get("should_act")
        reason = arguments.get("reason")
        if should_act is not None and not isinstance(should_act, str):
            return Verdict(should_act="", reason="", outcome=Outcome.MALFORMED)
        if reason is not None and not isinstance(reason, str):
            return Verdict(should_act="", reason="", outcome=Outcome.MALFORMED)
        kept_reason = reason.strip() if reason is not None else ""
        if should_act is None or reason is None:
            return Verdict(should_act="", reason=kept_reason, outcome=Outcome.MALFORMED)
        value = should_act.strip()
        if value == SHOULD_ACT_SEND:
            return Verdict(should_act=SHOULD_ACT_SEND, reason=kept_reason, outcome=Outcome.ACT)
        if value == SHOULD_ACT_NO_ACTION:
            return Verdict(should_act=SHOULD_ACT_NO_ACTION, reason=kept_reason, outcome=Outcome.NO_ACTION)
        return Verdict(should_act="", reason=kept_reason, outcome=Outcome.MALFORMED)
    return Verdict(should_act="", reason="", outcome=Outcome.MISSING)
