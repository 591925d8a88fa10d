"""Selection latency (C5) for threads of 100, 10,000 and 100,000 events, and the queries each selection costs.

Creates its own throw-away database (Django's test database for the configured DATABASE_URL: `test_<name>` on
PostgreSQL, in memory on SQLite), bulk-inserts three threads side by side into the same tables, times
`context_package_build` for the Coder bot in each, and drops the database at the end.

Target (issue 3): p50 at 100,000 events / p50 at 100 events <= 1.5, and the same query count for every size.
Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/amux_b python -m bench selection`.
"""

from __future__ import annotations

import os
import statistics
import time

THREAD_SIZES = (100, 10_000, 100_000)
WARMUP_RUNS = 20
TIMED_RUNS = 200
BULK_BATCH = 5000
CHAT_ID = "oc_bench"
CODER_BRIDGE = "cli_coder"
PLANNER_BRIDGE = "cli_planner"
TARGET_RATIO = 1.5
# owner_only reads other bots' outputs only: the branch skips the Coder's own outputs and never sees discussion.
MODES = ("shared", "owner_only")


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    import django

    django.setup()


def _event_shape(index: int) -> tuple[str, str, str]:
    """(event/item type, bridge_id, author label) for the index-th event of a thread: a realistic mix."""
    slot = index % 20
    if slot < 10:
        return "human_message", CODER_BRIDGE, "Alice"  # discussion as the Coder's bridge recorded it
    if slot < 12:
        return "human_message", PLANNER_BRIDGE, "Alice"  # the Planner bridge's copies
    if slot < 17:
        return "agent_output", PLANNER_BRIDGE, "planner/planner-h5"
    return "agent_output", CODER_BRIDGE, "coder/coder-main"  # the Coder's own outputs: excluded


def _thread_insert(root_msg_id: str, size: int) -> None:
    from threadcontext.models import ThreadContextItem, ThreadEvent

    for start in range(0, size, BULK_BATCH):
        shapes = [(index, *_event_shape(index)) for index in range(start, min(start + BULK_BATCH, size))]
        events = ThreadEvent.objects.bulk_create(
            ThreadEvent(
                chat_id=CHAT_ID,
                root_msg_id=root_msg_id,
                message_id=f"{root_msg_id}_m{index}",
                event_type=item_type,
                bridge_id=bridge_id,
                bot_profile=bridge_id.removeprefix("cli_"),
                actor_type="user" if item_type == "human_message" else "bot",
                text=f"message {index} " + "x" * (index % 200),
            )
            for index, item_type, bridge_id, _ in shapes
        )
        ThreadContextItem.objects.bulk_create(
            ThreadContextItem(
                event=event,
                chat_id=CHAT_ID,
                root_msg_id=root_msg_id,
                bridge_id=event.bridge_id,
                message_id=event.message_id,
                item_type=event.event_type,
                author_label=label,
                text=event.text,
                token_estimate=len(event.text) // 4,
            )
            for event, (_, _, _, label) in zip(events, shapes, strict=True)
        )


def _measure(workspace, root_msg_id: str) -> tuple[float, float, int, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from threadcontext.selectors import ContextRequest, context_package_build

    def select():
        return context_package_build(
            request=ContextRequest(
                workspace=workspace,
                bridge_id=CODER_BRIDGE,
                bot_profile="coder",
                chat_id=CHAT_ID,
                root_msg_id=root_msg_id,
                message_id="om_request",
                request_text="implement it",
            )
        )

    for _ in range(WARMUP_RUNS):
        select()
    with CaptureQueriesContext(connection) as queries:
        package = select()
    timings = []
    for _ in range(TIMED_RUNS):
        started = time.perf_counter()
        select()
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    p95 = timings[int(len(timings) * 0.95) - 1]
    return statistics.median(timings), p95, len(queries.captured_queries), len(package.selected)


def run() -> None:
    _setup_django()
    from django.db import connection

    from threadcontext.models import Workspace

    vendor = connection.vendor
    old_name = connection.settings_dict["NAME"]
    test_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        workspace = Workspace.objects.create(
            bot_profile="coder", chat_id=CHAT_ID, mode="shared", shared_thread_enabled=True
        )
        started = time.perf_counter()
        for size in THREAD_SIZES:
            _thread_insert(f"om_root_{size}", size)
        if vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        insert_seconds = time.perf_counter() - started

        results = {}
        for mode in MODES:
            Workspace.objects.filter(pk=workspace.pk).update(mode=mode)
            workspace.refresh_from_db()
            results[mode] = [(size, *_measure(workspace, f"om_root_{size}")) for size in THREAD_SIZES]
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)

    print(f"database: {vendor} ({test_name}, dropped); {sum(THREAD_SIZES):,} events inserted in {insert_seconds:.1f}s")
    print(f"{WARMUP_RUNS} warm-up + {TIMED_RUNS} timed selections per thread and mode (item limit 20, 24000 chars)")
    header = f"{'mode':<10}  {'events':>8}  {'p50 ms':>8}  {'p95 ms':>8}  {'queries':>7}  {'selected':>8}"
    print(f"{header}  {'p50 / p50(100)':>14}")
    verdicts = []
    for mode, rows in results.items():
        baseline_p50 = rows[0][1]
        for size, p50, p95, queries, selected in rows:
            ratio = p50 / baseline_p50
            print(f"{mode:<10}  {size:>8,}  {p50:>8.3f}  {p95:>8.3f}  {queries:>7}  {selected:>8}  {ratio:>14.2f}")
        ratio = rows[-1][1] / baseline_p50
        constant = len({row[3] for row in rows}) == 1
        verdicts.append(ratio <= TARGET_RATIO and constant)
        print(f"{mode}: ratio 100k/100 p50 = {ratio:.2f} (target <= {TARGET_RATIO}); constant query count: {constant}")
    print("result:", "meets the target" if all(verdicts) else "MISSES the target")


if __name__ == "__main__":
    run()
