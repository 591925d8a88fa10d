"""Primary input assembly: token estimation, the context budget and the request the primary model gets (T3).

Pure functions over dataclasses (no ORM): the runner and the /context/ selector both call them, so what the API
shows is exactly what a turn sends.
"""

from dataclasses import dataclass, replace

from agents.llm.base import ChatMessage, CompletionRequest, ImageInput
from agents.models import LLMModel, Message

# A model whose window is undeclared (context_window = 0) is assumed to have this many tokens.
DEFAULT_CONTEXT_WINDOW_TOKENS = 8192
# Tokens are estimated without a tokenizer (none is shipped for every provider): ASCII characters / 4 (rounded
# up), every other character one token (CJK runs about one character per token, and Feishu groups write
# Chinese: counting it at 1/4 would overflow the window fourfold), plus a small per-message overhead.
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(text: str) -> int:
    ascii_chars = len(text.encode("ascii", "ignore"))
    return -(-ascii_chars // CHARS_PER_TOKEN) + (len(text) - ascii_chars) + MESSAGE_OVERHEAD_TOKENS


# Issue 30, finding 6: what a cut part says instead of its tail, so the model (and explain) knows it saw a part.
CUT_LABEL = "\n[cut: {what} had {total} characters; the first {kept} are kept to fit the model's context window]"
# The share of the window left after the answer's reserve that the system prompt may take at most; the current
# message (with its inlined parts) gets what it and the contract leave, context messages what is left after that.
SYSTEM_PROMPT_SHARE = 4  # a quarter


def text_within_tokens(text: str, *, max_tokens: int, what: str) -> str:
    """`text`, or its longest prefix that fits `max_tokens` together with a label saying what was cut."""
    if estimate_tokens(text) <= max_tokens:
        return text
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits; estimate_tokens grows with the prefix
        middle = (low + high + 1) // 2
        label = CUT_LABEL.format(what=what, total=len(text), kept=middle)
        if estimate_tokens(text[:middle] + label) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    label = CUT_LABEL.format(what=what, total=len(text), kept=low)
    return text[:low] + label if estimate_tokens(label) <= max_tokens else ""


def output_reserve_tokens(*, context_window: int, max_output_tokens: int) -> int:
    """The answer's share of the window, at most a quarter of it; the request asks for no more than this.

    Providers refuse a request whose input plus requested output exceeds the window, so the output the request
    asks for and the output the context budget leaves room for must be the same number.
    """
    return min(max_output_tokens, (context_window or DEFAULT_CONTEXT_WINDOW_TOKENS) // 4)


def context_budget_tokens(*, context_window: int, max_output_tokens: int, fixed_tokens: int) -> int:
    """Tokens left for context messages: the window minus the answer's reserve and the fixed parts."""
    window = context_window or DEFAULT_CONTEXT_WINDOW_TOKENS
    output_reserve = output_reserve_tokens(context_window=context_window, max_output_tokens=max_output_tokens)
    return max(window - output_reserve - fixed_tokens, 0)


def context_messages_upper_bound(*, context_window: int) -> int:
    """How many context messages could fit at most: each one costs at least MESSAGE_OVERHEAD_TOKENS."""
    return (context_window or DEFAULT_CONTEXT_WINDOW_TOKENS) // MESSAGE_OVERHEAD_TOKENS


def context_fit(*, messages: list[ChatMessage], budget_tokens: int) -> list[ChatMessage]:
    """The newest contiguous run of `messages` (oldest first) whose estimated tokens fit the budget (T3)."""
    kept: list[ChatMessage] = []
    used = 0
    for message in reversed(messages):
        cost = estimate_tokens(message.content)
        if used + cost > budget_tokens:
            break
        kept.append(message)
        used += cost
    kept.reverse()
    return kept


@dataclass(frozen=True)
class TurnAttachments:
    """What a channel fetched for one run of a turn (issue 12.5), joined to the user's prompt; never stored.

    `images` go on the user message (only a vision model is given any); `prompt_text` is appended to the prompt
    the model gets (labels saying what was not sent and why, untrusted blocks of inlined text files);
    `recorded_text` is what the turn's record keeps in its place: the same labels, each inlined body replaced by
    its label, so no attachment's body reaches the database.
    """

    images: tuple[ImageInput, ...] = ()
    prompt_text: str = ""
    recorded_text: str = ""


NO_ATTACHMENTS = TurnAttachments()


@dataclass(frozen=True)
class PrimaryInput:
    request: CompletionRequest
    context_message_ids: list[int]
    dropped_context_messages: int
    budget_tokens: int
    # The request as the turn records it: `request` with the attachments' bodies replaced by their labels.
    recorded_request: CompletionRequest


def _joined(prompt: str, addition: str) -> str:
    return f"{prompt}\n\n{addition}" if prompt and addition else prompt or addition


def primary_input_build(
    *,
    model: LLMModel,
    system_prompt: str,
    context: list[Message],
    user_prompt: str,
    activation_contract: str = "",
    attachments: TurnAttachments = NO_ATTACHMENTS,
) -> PrimaryInput:
    """System prompt + the newest context messages that fit + the new prompt with its attachments (+ the
    contract, never trimmed).

    The whole request fits the model's window (issue 30, finding 6): the system prompt is cut to its share, the
    current message with its inlined parts to what it and the contract (ours, bounded, never cut: P9) leave, each
    with a label saying what was cut.
    """
    window = model.context_window or DEFAULT_CONTEXT_WINDOW_TOKENS
    room = window - output_reserve_tokens(
        context_window=model.context_window, max_output_tokens=model.max_output_tokens
    )
    system_prompt = text_within_tokens(system_prompt, max_tokens=room // SYSTEM_PROMPT_SHARE, what="the system prompt")
    prompt_room = room - sum(estimate_tokens(text) for text in (system_prompt, activation_contract) if text.strip())
    what = "the current message with its inlined parts"
    prompt = ChatMessage(
        role="user",
        content=text_within_tokens(_joined(user_prompt, attachments.prompt_text), max_tokens=prompt_room, what=what),
        images=attachments.images,
    )
    fixed = [message for message in (prompt, ChatMessage(role="user", content=activation_contract)) if message.content]
    system = [ChatMessage(role="system", content=system_prompt)] if system_prompt.strip() else []
    budget = context_budget_tokens(
        context_window=model.context_window,
        max_output_tokens=model.max_output_tokens,
        fixed_tokens=sum(estimate_tokens(message.content) for message in (*system, *fixed)),
    )
    candidates = [
        ChatMessage(
            role="assistant" if message.kind == Message.Kind.AGENT_REPLY else "user",
            # What the model saw when the message was new (T3): its rendered prompt when it has one.
            content=message.prompt or message.content,
        )
        for message in context
    ]
    fitted = context_fit(messages=candidates, budget_tokens=budget)
    kept_ids = [message.pk for message in context[len(context) - len(fitted) :]] if fitted else []
    request = CompletionRequest(
        model=model.name,
        messages=(*system, *fitted, *fixed),
        max_output_tokens=output_reserve_tokens(
            context_window=model.context_window, max_output_tokens=model.max_output_tokens
        ),
    )
    recorded = request
    if attachments != NO_ATTACHMENTS:
        recorded_text = _joined(user_prompt, attachments.recorded_text)
        recorded_prompt = replace(prompt, content=text_within_tokens(recorded_text, max_tokens=prompt_room, what=what))
        recorded = replace(
            request, messages=tuple(recorded_prompt if message is prompt else message for message in request.messages)
        )
    return PrimaryInput(
        request=request,
        context_message_ids=kept_ids,
        dropped_context_messages=len(context) - len(fitted),
        budget_tokens=budget,
        recorded_request=recorded,
    )
