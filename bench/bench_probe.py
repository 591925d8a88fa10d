"""Discuss probe gate (issue 6): what the gate saves, what debounce saves, and what the gate costs per message.

A simulated discuss group of 1,000 human messages in bursts (1-12 messages 0.2-0.6 s apart, 20-120 s between
bursts; fixed seed). Exactly 5% of the messages need the bot (every message whose index * 7919 mod 100 < 5);
a deterministic stub judge says `send` when such a message came after the bot's last reply, else `no_action`.
The real code path runs: discuss_wake_schedule → discuss_wakes_sweep → discuss_wake_fire → probe_gate_run
(resolution, budget, window, request builder, verdict parser, ProbeJudgement row, log record) against the
bench's own throw-away database (Django's test database: `test_<name>` on PostgreSQL, in memory on SQLite).
Only the two model calls are stubs: the judge (instant, counted) and the primary (a cost model: the bot's
system prompt and tool schemas, PRIMARY_OVERHEAD_TOKENS, plus the newest 20 context items capped at 6,000
tokens, and PRIMARY_OUTPUT_TOKENS out; a reply is recorded as the bot's agent_output, as the bridge does).

Scenarios: ungated (no probe: every wake runs the primary, as without the feature), gated without debounce
(one probe per message), gated with the default debounce (3 s initial, 30 s max). The judge sees what changed
in the timeline since its last verdict plus a tail of messages it already saw (probe.rules.since_last_verdict);
before that it saw the newest 40 items on every probe: 0.808 (no debounce) and 0.156 (debounce) tokens
gated/ungated, against 0.383 and 0.111 with a fixed six-message tail. Where a debounced probe's 1,557 tokens
then went (the breakdown printed below): system prompt 550, transcript 687 (13.8 messages: 7.5 new, 6 seen),
schema 300 and output 20. Issue 11's cuts: the judge prompt says each rule once (550 -> 363 tokens) and the seen
tail shrinks as a burst brings its own context (six in view, at least two seen): 0.319 and 0.098, transcript 497
tokens in 10.1 messages, 0 needed replies missed either way. "Missed" counts the messages that need the bot
and that no judge saw before the bot next spoke (the stub judge sends on every one it sees).
Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/amux_d python -m bench probe`.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

MESSAGES = 1000
SEED = 42
CHAT_ID = "oc_bench_discuss"
ROOT = "group"
PRIMARY_OVERHEAD_TOKENS = 3000
PRIMARY_CONTEXT_ITEMS = 20
PRIMARY_CONTEXT_CAP_TOKENS = 6000
PRIMARY_OUTPUT_TOKENS = 150
JUDGE_OUTPUT_TOKENS = 20
JUDGE_SCHEMA_TOKENS = 300
NEEDS_BOT = "[needs the bot]"
MESSAGE_INDEX = re.compile(r"message (\d+):")
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    import django

    django.setup()


def _traffic() -> list[tuple[datetime, bool]]:
    """(time, needs the bot) per message: bursts of 1-12, deterministic."""
    rng = random.Random(SEED)
    now = T0
    messages: list[tuple[datetime, bool]] = []
    while len(messages) < MESSAGES:
        for _ in range(rng.randint(1, 12)):
            if len(messages) == MESSAGES:
                break
            index = len(messages)
            messages.append((now, (index * 7919) % 100 < 5))
            now += timedelta(milliseconds=rng.randint(200, 600))
        now += timedelta(seconds=rng.randint(20, 120))
    return messages


@dataclass
class Tally:
    probes: int = 0
    judge_tokens: int = 0
    judge_system_tokens: int = 0  # where the judge's tokens go: its system prompt,
    judge_transcript_tokens: int = 0  # the transcript it was shown,
    judge_transcript_messages: int = 0  # in this many messages; the rest is schema and output (constants)
    judge_seconds: float = 0.0
    primary_calls: int = 0
    primary_tokens: int = 0
    gate_seconds: float = 0.0  # schedule + sweep wall time, judge and primary time subtracted
    gate_queries: int = 0
    primary_seconds: float = 0.0
    primary_queries: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    replied_to: list[int] = field(default_factory=list)  # index of each primary call's newest message
    needed_seen: set[int] = field(default_factory=set)  # messages needing the bot the judge saw unanswered

    @property
    def total_tokens(self) -> int:
        return self.judge_tokens + self.primary_tokens


class StubJudge:
    """Says send when a message needing the bot came after the bot's last reply (its last assistant entry)."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    def complete(self, request):
        from agents.llm.base import CompletionResult, ToolCall, Usage
        from probe.rules import message_tokens

        started = time.perf_counter()
        send = False
        for message in reversed(request.messages[1:]):
            if message.role == "assistant":
                break
            if NEEDS_BOT in message.content:
                send = True
                self.tally.needed_seen.add(int(MESSAGE_INDEX.search(message.content).group(1)))
        usage = Usage(
            input_tokens=sum(message_tokens(m) for m in request.messages) + JUDGE_SCHEMA_TOKENS,
            output_tokens=JUDGE_OUTPUT_TOKENS,
        )
        self.tally.probes += 1
        self.tally.judge_tokens += usage.input_tokens + usage.output_tokens
        self.tally.judge_system_tokens += message_tokens(request.messages[0])
        self.tally.judge_transcript_tokens += sum(message_tokens(m) for m in request.messages[1:])
        self.tally.judge_transcript_messages += len(request.messages) - 1
        verdict = {"should_act": "send" if send else "no_action", "reason": "a question for the bot" if send else ""}
        result = CompletionResult(text="", tool_calls=(ToolCall(name="decide", arguments=verdict),), usage=usage)
        self.tally.judge_seconds += time.perf_counter() - started
        return result


def _scenario(name: str, *, gated: bool, debounce: bool, traffic, tally: Tally) -> Tally:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.models import Bot, Thread, Turn
    from feishu.discuss import fire as discuss_fire
    from feishu.discuss.sweep import discuss_wakes_sweep
    from feishu.discuss.wake import discuss_wake_schedule
    from probe import services as probe_services
    from probe.rules import message_tokens
    from tests.agents.factories import BotFactory, LLMModelFactory
    from threadcontext.models import ThreadContextItem, ThreadEvent, Workspace

    judge_model = LLMModelFactory(supports_tool_calls=True, context_window=128000)
    bot = BotFactory(
        slug=f"bench-{name}",
        name="Planner",
        group_reply_mode=Bot.GroupReplyMode.DISCUSS,
        discuss_probe_mode=Bot.ProbeMode.MODEL if gated else Bot.ProbeMode.OFF,
        discuss_probe_model=judge_model if gated else None,
        probe_debounce_initial_ms=3000 if debounce else 0,
        probe_debounce_max_ms=30000 if debounce else 0,
    )
    bot = Bot.objects.get(pk=bot.pk)
    chat_id = f"{CHAT_ID}-{name}"
    Workspace.objects.create(bot_profile=bot.slug, chat_id=chat_id, session_scope="group")
    thread = Thread.objects.create(bot=bot, runtime_mode="chat", channel="feishu", external_key=f"{chat_id}:group")

    def record(message_id: str, text: str, *, item_type: str, bridge_id: str, label: str) -> None:
        event = ThreadEvent.objects.create(
            chat_id=chat_id,
            root_msg_id=message_id,
            message_id=message_id,
            event_type=item_type,
            bridge_id=bridge_id,
            bot_profile=bot.slug,
            text=text,
        )
        ThreadContextItem.objects.create(
            event=event,
            chat_id=chat_id,
            root_msg_id=message_id,
            bridge_id=bridge_id,
            item_type=item_type,
            author_label=label,
            text=text,
            token_estimate=len(text) // 4,
        )

    def primary(*, bot, wake, gate):
        started = time.perf_counter()
        with CaptureQueriesContext(connection) as queries:
            turn = primary_run(bot=bot, wake=wake)
        tally.primary_seconds += time.perf_counter() - started
        tally.primary_queries += len(queries)
        return turn

    def primary_run(*, bot, wake):
        """The primary's cost model and its reply recorded as the bot's output (the bridge's job)."""
        items = list(
            ThreadContextItem.objects.filter(chat_id=chat_id)
            .order_by("-id")
            .values_list("text", flat=True)[:PRIMARY_CONTEXT_ITEMS]
        )
        from agents.llm.base import ChatMessage

        context = min(
            sum(message_tokens(ChatMessage(role="user", content=t)) for t in items), PRIMARY_CONTEXT_CAP_TOKENS
        )
        tally.primary_calls += 1
        tally.primary_tokens += PRIMARY_OVERHEAD_TOKENS + context + PRIMARY_OUTPUT_TOKENS
        tally.replied_to.append(int(wake.last_message_id.rsplit("_", 1)[1]))
        record(f"{wake.last_message_id}-reply", "Here is what I think.", item_type="agent_output",
               bridge_id=bot.bridge_id, label="planner")  # fmt: skip
        return Turn.objects.create(
            bot=bot, thread=thread, trigger="discuss", source_message_id=wake.last_message_id, status="delivered"
        )

    judge = StubJudge(tally)
    original_client, original_start = probe_services._judge_client, discuss_fire.discuss_activation_start
    probe_services._judge_client = lambda model: judge
    discuss_fire.discuss_activation_start = primary
    rng = random.Random(SEED + 1)
    try:
        for index, (at, needs_bot) in enumerate(traffic):
            text = f"message {index}: " + "lorem ipsum " * rng.randint(2, 30) + (f" {NEEDS_BOT}?" if needs_bot else "")
            message_id = f"om_{name}_{index}"
            record(message_id, text, item_type="human_message", bridge_id=bot.bridge_id, label=f"ou_user{index % 7}")
            judge_before, primary_before = tally.judge_seconds, tally.primary_seconds
            primary_queries_before = tally.primary_queries
            connection.queries_log.clear()  # the log keeps 9,000 queries: count per message
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                discuss_wake_schedule(bot=bot, chat_id=chat_id, root_msg_id=message_id, message_id=message_id,
                                      now=at)  # fmt: skip
                outcomes = discuss_wakes_sweep(now=at)
                elapsed = time.perf_counter() - started
            model_seconds = (tally.judge_seconds - judge_before) + (tally.primary_seconds - primary_before)
            tally.gate_seconds += elapsed - model_seconds
            tally.gate_queries += len(queries) - (tally.primary_queries - primary_queries_before)
            for outcome in outcomes:
                tally.outcomes[outcome] = tally.outcomes.get(outcome, 0) + 1
        outcomes = discuss_wakes_sweep(now=traffic[-1][0] + timedelta(minutes=5))
        for outcome in outcomes:
            tally.outcomes[outcome] = tally.outcomes.get(outcome, 0) + 1
    finally:
        probe_services._judge_client = original_client
        discuss_fire.discuss_activation_start = original_start
    return tally


def _missed(traffic, tally: Tally, *, gated: bool) -> int:
    """Messages that needed the bot and that no judge saw before the bot spoke after them (gated: the judge says
    send on every one it sees, so an unseen one is the only way to miss it); ungated: with no primary call at or
    after them."""
    needed = {index for index, (_, needs_bot) in enumerate(traffic) if needs_bot}
    if gated:
        return len(needed - tally.needed_seen)
    return sum(1 for index in needed if not any(reply >= index for reply in tally.replied_to))


def run() -> None:
    _setup_django()
    from django.db import connection

    logging.getLogger("probe.services").setLevel(logging.ERROR)  # one record per judgement: keep the output short
    logging.getLogger("feishu.discuss").setLevel(logging.ERROR)
    logging.getLogger("celery.app.trace").setLevel(logging.WARNING)  # the in-place fires: one record each
    from amuxweb.celery import app

    vendor = connection.vendor
    old_name = connection.settings_dict["NAME"]
    test_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    traffic = _traffic()
    results: dict[str, Tally] = {}
    # The sweep fires each wake in place only when tasks run eagerly; with REDIS_URL set (`make bench` for the
    # streaming bench) it would enqueue them to a broker no worker of this run reads, and judge nothing.
    was_eager, app.conf.task_always_eager = app.conf.task_always_eager, True
    try:
        for name, gated, debounce in (
            ("ungated", False, False),
            ("gated-no-debounce", True, False),
            ("gated-debounce", True, True),
        ):
            results[name] = _scenario(name, gated=gated, debounce=debounce, traffic=traffic, tally=Tally())
    finally:
        app.conf.task_always_eager = was_eager
        connection.creation.destroy_test_db(old_name, verbosity=0)

    needing = sum(1 for _, needs in traffic if needs)
    duration = (traffic[-1][0] - traffic[0][0]).total_seconds() / 60
    print(f"database: {vendor} ({test_name}, dropped); {MESSAGES} messages over {duration:.0f} min, "
          f"{needing} ({needing / MESSAGES:.0%}) need the bot")  # fmt: skip
    print(f"{'scenario':<19} {'probes':>6} {'probes/msg':>10} {'primary':>7} {'judge tok':>10} {'primary tok':>11} "
          f"{'total tok':>10} {'gate ms/msg':>11} {'queries/msg':>11}")  # fmt: skip
    for name, tally in results.items():
        print(
            f"{name:<19} {tally.probes:>6} {tally.probes / MESSAGES:>10.3f} {tally.primary_calls:>7} "
            f"{tally.judge_tokens:>10,} {tally.primary_tokens:>11,} {tally.total_tokens:>10,} "
            f"{tally.gate_seconds * 1000 / MESSAGES:>11.3f} {tally.gate_queries / MESSAGES:>11.2f}"
        )
    ungated, plain, debounced = results["ungated"], results["gated-no-debounce"], results["gated-debounce"]
    for name, tally in results.items():
        if tally.probes:
            print(f"judge tokens per probe, {name}: system prompt {tally.judge_system_tokens / tally.probes:.0f}, "
                  f"transcript {tally.judge_transcript_tokens / tally.probes:.0f} "
                  f"({tally.judge_transcript_messages / tally.probes:.1f} messages), "
                  f"schema {JUDGE_SCHEMA_TOKENS} and output {JUDGE_OUTPUT_TOKENS} (constants)")  # fmt: skip
    print(f"primary calls gated/ungated: {plain.primary_calls}/{ungated.primary_calls} = "
          f"{plain.primary_calls / ungated.primary_calls:.3f} (no debounce), "
          f"{debounced.primary_calls}/{ungated.primary_calls} = {debounced.primary_calls / ungated.primary_calls:.3f} "
          f"(debounce)")  # fmt: skip
    print(f"total tokens gated/ungated: {plain.total_tokens / ungated.total_tokens:.3f} (no debounce), "
          f"{debounced.total_tokens / ungated.total_tokens:.3f} (debounce)")  # fmt: skip
    print("needed replies missed: " + ", ".join(
        f"{name} {_missed(traffic, tally, gated=name != 'ungated')}" for name, tally in results.items()
    ))  # fmt: skip
    print(f"probes per message: {plain.probes / MESSAGES:.3f} without debounce, "
          f"{debounced.probes / MESSAGES:.3f} with debounce (ratio {debounced.probes / max(plain.probes, 1):.3f})")  # fmt: skip
    print("gate ms/msg and queries/msg: wake schedule + sweep + gate + judgement row + log record per message; "
          "the judge's and the primary's time and queries excluded")  # fmt: skip
    print("outcomes: " + "; ".join(f"{name}: {tally.outcomes}" for name, tally in results.items()))
