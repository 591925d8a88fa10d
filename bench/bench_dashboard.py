"""Admin dashboard (issue 14 item 1): queries per render and render time at production-like sizes.

Data: BOTS bots, TURNS turns (70% delivered with a 0.3-8 s latency, 20% skipped, 5% failed, 5% delivery failed, usage
tokens on the delivered ones), MESSAGES messages and JUDGEMENTS judgements (act / no_action / failure
outcomes), all spread over the last 30 days (fixed seed), so the 24 h and 7 day windows hold 1/30 and 7/30
of them. Then RENDERS renders of /admin/ by a logged-in superuser through Django's test client (the real
URL, view, selectors and template): queries per render (must not depend on the sizes) and p50/p95 time.
Runs against the bench's own throw-away database (Django's test database: `test_<name>`).

Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/amux_d python -m bench dashboard` (full size);
`python -m bench dashboard --scale 0.01` for a quick run (every size times the scale).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta

BOTS = 20
TURNS = 100_000
MESSAGES = 1_000_000
JUDGEMENTS = 200_000
RENDERS = 30
DAYS = 30
SEED = 14
BATCH = 5_000
GOAL_P95_MS = 300


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    import django

    django.setup()


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench dashboard")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the row counts (the bots stay 20)")
    parser.add_argument("--renders", type=int, default=RENDERS)
    options, _names = parser.parse_known_args(sys.argv[1:])
    return options


def _populate(*, bots: int, turns: int, messages: int, judgements: int) -> None:
    from django.db import connection
    from django.utils import timezone

    from agents.models import Message, Thread, Turn
    from probe.models import ProbeJudgement
    from tests.agents.factories import BotFactory

    rng = random.Random(SEED)
    now = timezone.now()
    span = DAYS * 86400
    bot_rows = [BotFactory(slug=f"bench-{n}", name=f"Bench {n:02d}") for n in range(bots)]
    threads = [Thread.objects.create(bot=bot, runtime_mode="chat", channel="feishu") for bot in bot_rows]

    batch: list = []
    for index in range(turns):
        bot_index = index % bots
        at = now - timedelta(seconds=rng.uniform(0, span))
        roll = rng.random()
        status = (
            "delivered" if roll < 0.7 else "skipped" if roll < 0.9 else "failed" if roll < 0.95 else "delivery_failed"
        )
        delivered = status == "delivered"
        batch.append(
            Turn(
                bot=bot_rows[bot_index],
                thread=threads[bot_index],
                trigger="mention",
                source_message_id=f"om_{index}",
                status=status,
                usage={"input_tokens": rng.randint(500, 6000), "output_tokens": rng.randint(20, 600)}
                if delivered
                else {},
                queued_at=at,
                started_at=at if delivered else None,
                finished_at=at + timedelta(milliseconds=rng.randint(300, 8000)) if delivered else None,
            )
        )
        if len(batch) == BATCH:
            Turn.objects.bulk_create(batch)
            batch = []
    Turn.objects.bulk_create(batch)
    # queued_at is auto_now_add: bulk_create set it to now; spread it again, deterministically per row.
    _respread(Turn, "queued_at", now=now, span=span)

    outcomes = ["no_action"] * 70 + ["act"] * 22 + ["error"] * 4 + ["missing"] * 2 + ["malformed"] + ["disabled"]
    batch = []
    for index in range(judgements):
        outcome = rng.choice(outcomes)
        batch.append(
            ProbeJudgement(
                bot=bot_rows[index % bots],
                gate_ran=outcome != "disabled",
                cause="discuss_wake",
                outcome=outcome,
                activated=outcome == "act",
                input_tokens=rng.randint(300, 3000),
                output_tokens=rng.randint(5, 40),
                duration_ms=rng.randint(100, 2000),
            )
        )
        if len(batch) == BATCH:
            ProbeJudgement.objects.bulk_create(batch)
            batch = []
    ProbeJudgement.objects.bulk_create(batch)
    _respread(ProbeJudgement, "created_at", now=now, span=span)

    if connection.vendor == "postgresql":
        # A million rows through the ORM would take minutes; the dashboard never reads them, their size matters.
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {Message._meta.db_table} (thread_id, kind, visibility_mask, content, prompt, author,"
                " external_message_id, usage, created_at)"
                " SELECT (%s::bigint[])[1 + (n %% %s)], 'user_message', 1, 'message ' || n, '', 'ou_bench', '',"
                " '{}'::jsonb, now() - (random() * %s) * interval '1 second' FROM generate_series(1, %s) AS n",
                [[thread.pk for thread in threads], len(threads), span, messages],
            )
            # VACUUM too: the respread rewrote every turn and judgement once, a table in production is not.
            cursor.execute("VACUUM ANALYZE")
    else:
        thread_ids = [thread.pk for thread in threads]
        for start in range(0, messages, BATCH):
            Message.objects.bulk_create(
                Message(
                    thread_id=thread_ids[n % len(thread_ids)],
                    kind="user_message",
                    visibility_mask=1,
                    content=f"message {n}",
                )  # fmt: skip
                for n in range(start, min(start + BATCH, messages))
            )


def _respread(model, column: str, *, now, span: int) -> None:
    """Spread an auto_now_add column over the last `span` seconds (pk-derived, deterministic); a turn's
    started_at/finished_at move with its queued_at, keeping its latency."""
    from django.db import connection

    table = model._meta.db_table
    is_turn = column == "queued_at"
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET {column} = %s - ((id * 7919) %% %s) * interval '1 second'", [now, span])
            if is_turn:
                cursor.execute(
                    f"UPDATE {table} SET finished_at = queued_at + (finished_at - started_at), started_at = queued_at"
                    " WHERE started_at IS NOT NULL"
                )
        return
    rows = model.objects.values_list("pk", "started_at", "finished_at") if is_turn else model.objects.values_list("pk")
    for pk, *times in rows:
        at = now - timedelta(seconds=(pk * 7919) % span)
        fields = {column: at}
        if is_turn and times[0] is not None:
            fields.update(started_at=at, finished_at=at + (times[1] - times[0]))
        model.objects.filter(pk=pk).update(**fields)


def _measure(renders: int) -> tuple[list[int], list[float]]:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from tests.agents.factories import UserFactory

    setup_test_environment()  # the test client's host ("testserver") is allowed, as under pytest
    client = Client()
    client.force_login(UserFactory(username="bench-root", is_staff=True, is_superuser=True))
    client.get("/admin/")  # warm the template and URL caches
    queries, times = [], []
    for _ in range(renders):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get("/admin/")
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
        queries.append(len(captured))
    return queries, times


def run() -> None:
    _setup_django()
    from django.db import connection

    options = _options()
    sizes = {
        "bots": BOTS,
        "turns": int(TURNS * options.scale),
        "messages": int(MESSAGES * options.scale),
        "judgements": int(JUDGEMENTS * options.scale),
    }
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        started = time.perf_counter()
        _populate(**sizes)
        populate_s = time.perf_counter() - started
        queries, times = _measure(options.renders)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)

    p95 = statistics.quantiles(times, n=20)[-1] if len(times) > 1 else times[0]
    print(f"database: {connection.vendor}; sizes: {sizes}; populated in {populate_s:.1f} s")
    print(f"renders: {len(times)}; queries per render: min {min(queries)}, max {max(queries)}")
    print(f"render time: p50 {statistics.median(times):.1f} ms, p95 {p95:.1f} ms (goal < {GOAL_P95_MS} ms)")
