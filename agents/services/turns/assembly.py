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
    contract, never trimmed)."""
    prompt = ChatMessage(role="user", content=_joined(user_prompt, attachments.prompt_text), images=attachments.images)
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
        recorded_prompt = replace(prompt, content=_joined(user_prompt, attachments.recorded_text))
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
