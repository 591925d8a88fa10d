"""Celery workers started together on a fresh embedded-broker file, round after round (issue 36, A14); run by
tests/test_embedded_broker.py as `python -m tests.embedded_broker_workers <directory> <rounds> <workers>` with
`amuxweb.settings.local` and DATABASE_URL on a SQLite file in <directory>.

Every worker is the real one (`celery worker`'s own entry: the embedded transport, the app's queues, its
worker_init and worker_ready receivers), each in a process of its own; only the imports are shared, and the Django
system checks Celery runs in each are skipped (`main`). This process loads Django, the app and the worker code once
and migrates the hub database once; each round then forks `workers` children, each pointed at the round's new
broker file, and holds each at the end of its worker_init until all are there, so they reach the broker within
milliseconds of each other: a tighter race than `make run`'s honcho starting them. A fresh `celery worker` spends
~2 s of CPU importing before it touches the broker, so twenty rounds of four would take minutes on CI's two cores;
forked, a round takes under a second.

A round waits until every worker logged its ready line or exited, then kills them (the broker file is thrown
away, nothing needs a warm shutdown). The last line on stdout is a JSON list, one entry per worker started.
"""

import json
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import NoReturn

import django
from celery.bin import celery  # noqa: F401 - loaded once here, not by each fork: `celery worker`'s command line
from celery.signals import worker_init
from django.core.management import call_command
from django.db import connections

from amuxweb import embedded_broker  # noqa: F401 - loaded once here too: the transport, SQLAlchemy with it
from amuxweb.celery import app
from feishu import lark_modules_load

READY_LINE = " ready."  # celery.apps.worker: "<hostname> ready."
LOST_LINE = "Connection to broker lost"  # celery's consumer, when a broker call raised a connection error
READY_SECONDS = 30  # per round; a worker boots in well under a second once imported
# One task at a time, no broadcasts between workers: what is left is what every worker does at its start.
WORKER_ARGUMENTS = (
    *("worker", "--pool=solo", "--loglevel=INFO"),
    *("--without-gossip", "--without-mingle", "--without-heartbeat"),
)


def worker_run(*, broker_file: Path, log_path: Path, hostname: str, barrier: Barrier) -> NoReturn:
    """In a forked child: one worker, its output in `log_path`, until it stops or is killed."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        # The last worker_init receiver (the app's own ran first): every worker of the round waits here, then all
        # go on to the broker at once.
        worker_init.connect(lambda **_: barrier.wait(timeout=READY_SECONDS), weak=False)
        app.conf.update(broker_url=f"sqlite:///{broker_file}")  # the settings computed one for no round
        app.worker_main([*WORKER_ARGUMENTS, f"--hostname={hostname}"])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # never back into the parent's code; whether the worker ran is in its log and in being alive


def round_run(*, directory: Path, number: int, workers: int) -> list[dict[str, object]]:
    """Fork `workers` workers on a new broker file; wait for each to be ready or gone; kill them; what each did."""
    round_directory = directory / f"round-{number:02d}"
    round_directory.mkdir()
    broker_file = round_directory / "celery-broker.sqlite3"
    logs = [round_directory / f"worker-{index}.log" for index in range(workers)]
    sys.stdout.flush()
    sys.stderr.flush()  # or a child would write this process's buffered output a second time
    children: list[int] = []
    barrier = multiprocessing.get_context("fork").Barrier(workers)
    for index, log_path in enumerate(logs):
        child = os.fork()
        if child == 0:
            hostname = f"cold-{number}-{index}@%h"
            worker_run(broker_file=broker_file, log_path=log_path, hostname=hostname, barrier=barrier)
        children.append(child)
    exited: set[int] = set()

    def settled() -> bool:
        exited.update(child for child in children if child not in exited and os.waitpid(child, os.WNOHANG)[0])
        return all(child in exited or READY_LINE in _text(log) for child, log in zip(children, logs, strict=True))

    deadline = time.monotonic() + READY_SECONDS
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.05)
    outcomes = []
    for index, (child, log_path) in enumerate(zip(children, logs, strict=True)):
        text = _text(log_path)
        outcomes.append(
            {
                "round": number,
                "worker": index,
                "is_up": child not in exited and READY_LINE in text,
                "has_exited": child in exited,
                "lost_broker": LOST_LINE in text,
                "log": str(log_path),
            }
        )
    for child in children:
        if child not in exited:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    return outcomes


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def main(directory: Path, rounds: int, workers: int) -> None:
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)  # the workers' ready receivers read the hub database
    lark_modules_load()  # what the app's worker_init receiver loads, here once rather than in every child
    # Celery's Django fixup runs the system checks in every worker as it starts: ~0.15 s of CPU each, half of a
    # round's, and nothing to do with the broker (`manage.py check` and CI's runs have them).
    os.environ["CELERY_SKIP_CHECKS"] = "1"
    connections.close_all()  # a SQLite connection must not be shared with the forked children
    outcomes = []
    for number in range(rounds):
        outcomes.extend(round_run(directory=directory, number=number, workers=workers))
    print(json.dumps(outcomes))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
