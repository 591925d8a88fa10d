"""A discuss turn sees the conversation its judge saw (ARCHITECTURE §11.1 O5), whatever shared_thread_enabled says.

The judge woke the bot *because of* the conversation, so the primary gets it too: the transcript the judge was
given (feishu.discuss.transcript.discuss_transcript_build, unchanged: every line with its author or bot label, this
bot's own outputs as "you") is noted on the turn when the wake starts it, and the channel's prepare puts it in
front of the request; the activation contract stays the last message (the runner adds it). `shared_thread_enabled`
still governs the thread context of @-requests (seed 002). Lines the rendered thread context already carries are
not repeated.
"""

from agents.llm.base import ChatMessage
from agents.models import Turn
from agents.services.turns.ledger import turn_channel_state_merge
from threadcontext.explain import DISCUSS_TRANSCRIPT_KEY
from threadcontext.models import ThreadContextDecision

TRANSCRIPT_KEY = "discuss_transcript"
TRANSCRIPT_HEADER = "[The conversation that woke you, oldest first]"
OWN_LABEL = "you"
# What follows the transcript: the message the wake is about (the label the rendered prompts use for it).
REQUEST_LABEL = "[Conversation input]"


def discuss_transcript_note(*, turn: Turn, transcript: list[ChatMessage]) -> None:
    """Keep the judge's transcript on the discuss turn it started (inside the wake's transaction)."""
    lines = [{"role": message.role, "content": message.content} for message in transcript if message.content]
    turn_channel_state_merge(turn=turn, values={TRANSCRIPT_KEY: lines})


def transcript_lines(*, turn: Turn) -> list[str]:
    """The judge's transcript as lines, this bot's own outputs labelled as its own."""
    noted = (turn.channel_state or {}).get(TRANSCRIPT_KEY) or []
    return [
        f"{OWN_LABEL}: {line['content']}" if line.get("role") == "assistant" else str(line.get("content", ""))
        for line in noted
    ]


def prompt_with_transcript(*, turn: Turn, prompt: str) -> str:
    """The discuss turn's prompt with the conversation in front (a line already in the prompt is not repeated)."""
    if turn.trigger != Turn.Trigger.DISCUSS:
        return prompt
    lines = [line for line in transcript_lines(turn=turn) if line and line.split(": ", 1)[-1] not in prompt]
    if not lines:
        return prompt
    return "\n".join([TRANSCRIPT_HEADER, *lines, REQUEST_LABEL, prompt])


def discuss_prompt_with_transcript(*, turn: Turn, decision: ThreadContextDecision, prompt: str) -> str:
    """prompt_with_transcript, and the context decision's preview updated so explain lists what the model got."""
    full = prompt_with_transcript(turn=turn, prompt=prompt)
    if full != prompt:
        # The decision was recorded by this prepare a moment ago: nothing else writes it.
        diagnostics = {**(decision.diagnostics or {}), DISCUSS_TRANSCRIPT_KEY: transcript_lines(turn=turn)}
        ThreadContextDecision.objects.filter(pk=decision.pk).update(prompt_preview=full, diagnostics=diagnostics)
    return full
