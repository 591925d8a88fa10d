"""A14 (issue 36): no broker-table race at a cold start of the embedded default (amuxweb/embedded_broker.py).

Workers started together on a fresh broker file each create kombu's tables and each queue's row. Before the
transport tolerated another process doing the same at the same moment, 9 to 18 of the 20 rounds below lost a
worker (an IntegrityError on the queue name: the worker exited, and under honcho every process with it) or had one
reconnect ("Connection to broker lost": a table or the switch to WAL taken by another).

The race is proved, not hoped for: tests/embedded_broker_workers.py forks the workers of a round from one loaded
process and holds each at the end of its worker_init until all four are there, so all reach the broker within
milliseconds, round after round (15-20 s for the twenty rounds on two cores).

And none needs to race: `manage.py embedded_broker_prepare`, run after migrate by `make run` and by the tests that
start a hub on the embedded default, makes the file, its tables and every queue's row before they start.

In the SQLite run (`make test`); the PostgreSQL + Redis run has no embedded broker to prove it on.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from django.conf import settings

REPOSITORY = Path(__file__).resolve().parent.parent
ROUNDS = 20
WORKERS = 4
# The harness's own bound: its migrate, then every round (each waits at most READY_SECONDS for its workers).
HARNESS_TIMEOUT_SECONDS = 240

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("REDIS_URL")), reason="the embedded default's run (no REDIS_URL) covers it; this run has Redis"
)


def embedded_env(directory: Path) -> dict[str, str]:
    """The embedded default's environment (`make run`'s), on a SQLite file in `directory`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "PYTEST_")) and key not in ("DATABASE_URL", "REDIS_URL")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="amuxweb.settings.local",
        DATABASE_URL=f"sqlite:///{directory / 'amuxweb.sqlite3'}",
        PROMETHEUS_MULTIPROC_DIR=str(directory / "prometheus"),
    )
    return env


def manage(directory: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        env=embedded_env(directory),
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def broker_read(broker_file: Path) -> dict[str, object]:
    with closing(sqlite3.connect(broker_file)) as database:
        return {
            "tables": sorted(row[0] for row in database.execute("SELECT name FROM sqlite_master WHERE type='table'")),
            "queues": sorted(database.execute("SELECT id, name FROM kombu_queue")),
            "journal_mode": database.execute("PRAGMA journal_mode").fetchone()[0],
        }


def workers_cold_start(directory: Path, *, rounds: int, workers: int) -> list[dict]:
    """What each worker of each round did (tests/embedded_broker_workers.py); its forks die with it."""
    harness = subprocess.Popen(
        [sys.executable, "-m", "tests.embedded_broker_workers", str(directory), str(rounds), str(workers)],
        env=embedded_env(directory),
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its forked workers share its process group: one killpg ends any left
    )
    try:
        stdout, stderr = harness.communicate(timeout=HARNESS_TIMEOUT_SECONDS)
    finally:
        try:
            os.killpg(harness.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # all gone, as they should be
        harness.wait()
    assert harness.returncode == 0, stderr.decode(errors="replace")[-3000:]
    return json.loads(stdout.decode().splitlines()[-1])


def broker_trouble(outcome: dict) -> str:
    """A failed worker's lines about its broker (else its last lines: it never got that far), for the assertion."""
    lines = Path(outcome["log"]).read_text(errors="replace").splitlines()
    picked = [line[:240] for line in lines if "broker" in line or "Error" in line] or lines[-5:]
    heading = f"round {outcome['round']} worker {outcome['worker']} (exited: {outcome['has_exited']}):"
    return "\n".join([heading, *picked])


def test_a14_four_workers_cold_start_on_a_fresh_embedded_broker(tmp_path):
    # given: a migrated hub database and, each round, a broker file that does not exist yet
    # when: four workers start on it at once, twenty rounds in a row
    outcomes = workers_cold_start(tmp_path, rounds=ROUNDS, workers=WORKERS)
    # then: every worker of every round is up, and none had to reconnect to its broker on the way
    assert len(outcomes) == ROUNDS * WORKERS
    failed = [outcome for outcome in outcomes if not outcome["is_up"] or outcome["lost_broker"]]
    assert failed == [], (
        f"{len(failed)} of {len(outcomes)} workers in {len({outcome['round'] for outcome in failed})} of {ROUNDS} "
        "rounds did not come up or lost their broker:\n" + "\n".join(broker_trouble(outcome) for outcome in failed[:4])
    )


def test_a14_embedded_broker_prepare_makes_the_tables_and_every_queue_before_any_worker_starts(tmp_path):
    # given: a fresh clone's embedded default, no broker file yet
    broker_file = tmp_path / "celery-broker.sqlite3"  # beside the database (amuxweb/settings/base.py)
    queues = sorted(settings.CELERY_TASK_QUEUES)
    # when: `make run`'s step after migrate
    printed = manage(tmp_path, "embedded_broker_prepare")
    # then: the file in WAL mode, kombu's tables, and a row for every queue a worker consumes
    prepared = broker_read(broker_file)
    assert prepared["tables"] == ["kombu_message", "kombu_queue", "sqlite_sequence"]
    assert sorted(name for _, name in prepared["queues"]) == queues
    assert prepared["journal_mode"] == "wal"
    assert printed == f"Embedded broker ready: sqlite:///{broker_file} (queues: {', '.join(queues)})\n"


def test_a14_embedded_broker_prepare_run_again_changes_nothing(tmp_path):
    # given: a prepared broker (the first `make run`)
    manage(tmp_path, "embedded_broker_prepare")
    prepared = broker_read(tmp_path / "celery-broker.sqlite3")
    # when: every later `make run`
    manage(tmp_path, "embedded_broker_prepare")
    # then: the same rows, none inserted again
    assert broker_read(tmp_path / "celery-broker.sqlite3") == prepared
