"""`python -m bench pipeline --hot-topic 3` (issue 22): besides the mix, one topic receives 3 @-messages per second,
and the report says what one turn at a time per conversation (O1) adds to their latency.

The topic is opened by an @ at the phase's start in the first ordinary group; then the messages arrive at the given
rate, each an @ of the group's bot in that topic. Its bot keeps the default queue mode, `collect`: a message that
arrives while the topic's turn runs waits and is answered with the others waiting with it, by one reply to the
newest of them. A message's latency is therefore the time from its webhook POST to the reply of the turn that
answered it (its own, or the one that collected it: `Turn.channel_state["collected"]`), minus the model's
latency, as for the mix. Reported: messages, turns that answered them, messages per reply, replies beyond one per
message (must be 0), unanswered messages (must be 0), and the added latency p50/p99.
"""

import os
import statistics
import sys

from bench.answers import answered_at, percentile

HOT_PREFIX = "hot"


def hot_rate() -> float:
    """`--hot-topic N`: messages per second into the one topic (0: no hot topic); the load child reads it from
    the environment the bench gives it."""
    if "--hot-topic" in sys.argv[:-1]:
        return float(sys.argv[sys.argv.index("--hot-topic") + 1])
    return float(os.environ.get("AMUX_BENCH_HOT_TOPIC") or 0)


def hot_schedule(rate: float, seconds: int) -> list[float]:
    """When each message of the topic is posted, in seconds from the phase's start; the topic's root goes at 0."""
    count = int(rate * seconds)
    return [0.5 + index / rate for index in range(count)]


def hot_message_id(phase: str, index: int) -> str:
    return f"om_{phase}_{HOT_PREFIX}{index}"


def hot_root_id(phase: str) -> str:
    return f"om_{phase}_{HOT_PREFIX}root"


def hot_line(
    *,
    posts: list[dict],
    turns: list[tuple[int, str, str, list | None]],
    replies: dict[str, float],
    reply_counts: dict[str, int],
    model_seconds: float,
) -> str:
    """The report's line for the hot topic."""
    hot = [post for post in posts if post["kind"] == "hot"]
    if not hot:
        return ""
    turns = [turn for turn in turns if _is_hot(turn[1])]
    answered = answered_at(turns, replies)
    overheads = [answered[post["id"]] - post["sent"] - model_seconds for post in hot if post["id"] in answered]
    answering = sum(1 for _, source, status, _ in turns if status != "skipped" and source in replies)
    doubled = sum(count - 1 for message, count in reply_counts.items() if _is_hot(message) and count > 1)
    latency = (
        f"p50 {statistics.median(overheads):.2f} s / p99 {percentile(overheads, 0.99):.2f} s" if overheads else "none"
    )
    return (
        f"  hot topic ({hot_rate():g} @/s into one topic, queue mode collect): {len(hot)} messages answered by "
        f"{answering} replies ({len(hot) / max(answering, 1):.1f} messages per reply), "
        f"{len(hot) - len(overheads)} unanswered, {doubled} replies beyond one per message; "
        f"added latency (webhook -> the reply that answered it - model latency) {latency}"
    )


def _is_hot(message_id: str) -> bool:
    """A message of the hot topic after its root (the root opened the topic: it is not one of the N per second)."""
    return f"_{HOT_PREFIX}" in message_id and not message_id.endswith(f"{HOT_PREFIX}root")
