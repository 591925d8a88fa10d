"""Turn overhead excluding model time: p50/p95 per turn and queries per turn, eager and through a real worker.

A REST chat turn is `rest_message_post` (store the user message, create the Turn, enqueue on commit) plus
`turn_run` (claim, context assembly, provider call, store the reply). Model time is the provider call as the
turn records it (`usage.model_duration_ms`); overhead = the turn's wall time minus that.

Providers: `local_rules` (no I/O at all) and the OpenAI Chat adapter against the local stub server answering
instantly (the real SDK path over loopback; its HTTP round trip counts as model time).

Eager: N turns in-process, each timed and its SQL queries counted. Worker (only when REDIS_URL is set): a real
`celery -A amuxweb worker --pool=solo` subprocess on the same database, turns posted one at a time; latency is
queued_at → finished_at minus model time, so it includes the broker hop and the worker picking the task up
(queries are the same code path as eager; "thruput" there is sequential turns per second, not capacity).

Database: its own — `<DATABASE_URL name>_bench_turns` on PostgreSQL (dropped afterwards) or a temporary
SQLite file (removed afterwards). Each thread keeps growing context, capped by the model's window.
"""

import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import django

EAGER_TURNS = 200
WORKER_TURNS = 100
WARMUP_TURNS = 5
MESSAGES_PER_THREAD = 20  # a new thread every 20 turns: context stays realistic, not unbounded
WORKER_TIMEOUT_SECONDS = 180


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    django.setup()
    logging.disable(logging.INFO)  # per-turn log lines would be part of what is measured


def _use_own_database() -> tuple[dict, str, object]:
    """Point Django at the bench's own database; (original settings, DATABASE_URL for a worker, cleanup)."""
    from django.db import connection

    original = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "postgresql":
        import psycopg

        name = f"{original['NAME']}_bench_turns"
        host, port, user = original["HOST"] or "127.0.0.1", original["PORT"] or 5432, original["USER"]
        password = f":{original['PASSWORD']}" if original.get("PASSWORD") else ""
        server = f"postgresql://{user}{password}@{host}:{port}"
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
        connection.settings_dict["NAME"] = name

        def cleanup() -> None:
            with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        return original, f"{server}/{name}", cleanup
    path = Path(tempfile.mkdtemp(prefix="bench_turns_")) / "bench.sqlite3"
    connection.settings_dict["NAME"] = str(path)

    def cleanup() -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        path.parent.rmdir()

    return original, f"sqlite:///{path}", cleanup


def _bots(stub_url: str):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from agents.models import Bot, LLMModel, Provider

    call_command("migrate", verbosity=0, interactive=False)
    owner = get_user_model().objects.create(username="bench-owner")
    local = Provider.objects.create(name="bench-local", kind=Provider.Kind.LOCAL_RULES)
    stub = Provider.objects.create(
        name="bench-stub", kind=Provider.Kind.OPENAI_CHAT, base_url=f"{stub_url}/v1", api_key="k", max_retries=0
    )
    bots = {}
    for provider in (local, stub):
        model = LLMModel.objects.create(provider=provider, name="bench-model", context_window=32000)
        bots[provider.kind] = Bot.objects.create(
            slug=f"bench-{provider.kind}".replace("_", "-"),
            name="Bench",
            owner=owner,
            primary_model=model,
            system_prompt="You are Bench, a helpful assistant.",
        )
    return bots


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(round(fraction * (len(ordered) - 1))), len(ordered) - 1)]


def _new_thread(bot):
    from agents.models import Thread
    from agents.services.threads import thread_create

    return thread_create(bot=bot, runtime_mode=Thread.RuntimeMode.CHAT, channel=Thread.Channel.REST, title="bench")


def _eager(bot, *, turns: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.models import Turn
    from agents.services.turns import rest_message_post

    overheads, totals, queries = [], [], []
    thread = _new_thread(bot)
    for index in range(WARMUP_TURNS + turns):
        if index % MESSAGES_PER_THREAD == 0:
            thread = _new_thread(bot)
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            _, turn = rest_message_post(thread=thread, content=f"message {index}: what do you think?", author="bench")
            elapsed_ms = (time.perf_counter() - started) * 1000
        turn = Turn.objects.get(pk=turn.pk)
        assert turn.status == Turn.Status.DELIVERED, (turn.status, turn.error)
        if index < WARMUP_TURNS:
            continue
        totals.append(elapsed_ms)
        overheads.append(elapsed_ms - turn.usage.get("model_duration_ms", 0))
        queries.append(len(captured.captured_queries))
    return {"overhead": overheads, "total": totals, "queries": queries}


def _start_worker(database_url: str) -> tuple[subprocess.Popen, Path]:
    log = Path(tempfile.mkstemp(prefix="bench-worker-", suffix=".log")[1])
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "amuxweb.settings.test", "DATABASE_URL": database_url}
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "amuxweb", "worker", "--pool=solo", "--loglevel=WARNING"]
        + ["--without-gossip", "--without-mingle", "--without-heartbeat", f"--hostname=bench-{os.getpid()}@%h"],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=Path(__file__).parents[1],
    )
    from amuxweb.celery import app

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if app.control.ping(timeout=0.5):
                return process, log
        except Exception:  # noqa: BLE001 - the broker may not answer yet
            pass
        if process.poll() is not None:
            break
    process.kill()
    raise RuntimeError(f"worker did not start:\n{log.read_text()[-3000:]}")


def _worker(bot, *, turns: int) -> dict:
    """Turns one at a time (no queueing behind each other): latency = enqueue → reply stored, minus model time."""
    from agents.models import Turn
    from agents.services.turns import rest_message_post

    overheads, totals = [], []
    thread = _new_thread(bot)
    started = time.perf_counter()
    for index in range(WARMUP_TURNS + turns):
        if index % MESSAGES_PER_THREAD == 0:
            thread = _new_thread(bot)
        _, turn = rest_message_post(thread=thread, content=f"message {index}: what do you think?", author="bench")
        deadline = time.monotonic() + WORKER_TIMEOUT_SECONDS
        while not Turn.objects.filter(pk=turn.pk, finished_at__isnull=False).exists():
            if time.monotonic() > deadline:
                raise RuntimeError("a worker turn did not finish in time")
            time.sleep(0.001)
        if index == WARMUP_TURNS - 1:
            started = time.perf_counter()
        if index < WARMUP_TURNS:
            continue
        turn = Turn.objects.get(pk=turn.pk)
        assert turn.status == Turn.Status.DELIVERED, (turn.status, turn.error)
        total_ms = (turn.finished_at - turn.queued_at).total_seconds() * 1000
        totals.append(total_ms)
        overheads.append(total_ms - turn.usage.get("model_duration_ms", 0))
    return {
        "overhead": overheads,
        "total": totals,
        "queries": [],
        "throughput": turns / (time.perf_counter() - started),
    }


def _row(label: str, result: dict) -> str:
    queries = f"{statistics.mean(result['queries']):.1f}" if result["queries"] else "-"
    throughput = f"{result['throughput']:.1f}/s" if "throughput" in result else "-"
    return (
        f"{label:<34} {len(result['overhead']):>5} {_percentile(result['overhead'], 0.5):>9.2f} "
        f"{_percentile(result['overhead'], 0.95):>9.2f} {_percentile(result['total'], 0.5):>9.2f} "
        f"{_percentile(result['total'], 0.95):>9.2f} {queries:>8} {throughput:>9}"
    )


def run() -> None:
    _setup()
    from django.db import connection

    from amuxweb.celery import app
    from tests.stubs.llm_servers import LLMStubServer

    original, database_url, cleanup = _use_own_database()
    stub = LLMStubServer().start()
    worker = None
    saved_eager = app.conf.task_always_eager
    try:
        bots = _bots(stub.url())
        print(f"database: {connection.vendor}; turns overhead = wall time - model call (ms)")
        print(f"{'mode / provider':<34} {'turns':>5} {'ovh p50':>9} {'ovh p95':>9} {'tot p50':>9} {'tot p95':>9} "
              f"{'queries':>8} {'thruput':>9}")  # fmt: skip
        app.conf.task_always_eager = True
        print(_row("eager / local_rules", _eager(bots["local_rules"], turns=EAGER_TURNS)))
        print(_row("eager / openai_chat stub (SDK)", _eager(bots["openai_chat"], turns=EAGER_TURNS)))
        if os.environ.get("REDIS_URL"):
            app.conf.task_always_eager = False
            connection.close()  # the worker and this process share the database from here on
            worker, log = _start_worker(database_url)
            print(_row("worker / local_rules", _worker(bots["local_rules"], turns=WORKER_TURNS)))
            print(_row("worker / openai_chat stub (SDK)", _worker(bots["openai_chat"], turns=WORKER_TURNS)))
        else:
            print("worker: skipped (set REDIS_URL to measure through a real Celery worker)")
    finally:
        app.conf.task_always_eager = saved_eager
        if worker is not None:
            os.killpg(worker.pid, 15)
            worker.wait(timeout=30)
        stub.stop()
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(original)
        cleanup()
