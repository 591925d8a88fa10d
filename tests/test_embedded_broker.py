"""A14 (issue 36): no broker-table race at a cold start of the embedded default (amuxweb/embedded_broker.py).

Workers started together on a fresh broker file each create kombu's tables and each queue's row; before the
transport tolerated another process doing the same at the same moment, one in two such starts lost a worker
(an IntegrityError on the queue name: the worker exited, and under honcho every process with it) or had one
reconnect ("Connection to broker lost": a table or the switch to WAL taken by another).

The race is proved, not hoped for: tests/embedded_broker_workers.py forks the workers of a round from one loaded
process and holds each at the end of its worker_init until all four are there, so all reach the broker within
milliseconds, round after round (about 20 s for the twenty rounds on CI's two cores).

In the SQLite run (`make test`); the PostgreSQL + Redis run has no embedded broker to prove it on.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

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
    return f"round {outcome['round']} worker {outcome['worker']} (exited: {outcome['has_exited']}):\n" + "\n".join(
        picked
    )


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
