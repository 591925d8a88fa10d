"""`make run`'s web process under a burst (issue 30, finding 7): runserver (the old Procfile line) against gunicorn
(the Procfile's `web:` line, amuxweb/gunicorn_conf.py), each on the embedded default (a migrated SQLite file of
its own), each sent bursts of 50 and 200 connections opened at once, every one posting one webhook request.

Counted per burst: answers, connections that took a SYN retransmission to open (the listen queue was full: Linux
drops the SYN, or resets it with tcp_abort_on_overflow), resets, refusals and timeouts, and the burst's wall time.
The claim: gunicorn answers all 200 at once, none dropped. Measured (2 shared cores, load ~3, one run each):
runserver 200 -> 13 answered at once, 88 after a SYN retry, 99 timed out at 20 s (21.1 s); another run 190
answered and 10 timed out at 60 s (61.4 s); gunicorn 200 -> 200 answered at once in 0.5-0.7 s (burst of 50: 0.7-2.5 s). `python -m bench web_burst` once more: runserver 50 -> 15
at once, 35 after a SYN retry (1.5 s); 200 -> 13, 93, 94 timed out (21.0 s); gunicorn 50 -> 50 (3.2 s), 200 -> 200
(0.6 s). No connection was reset on this machine (tcp_abort_on_overflow=0: the kernel drops, the client
retransmits); the issue's 119-129 resets were the same overflow answered with RSTs.
"""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.faults.servers import free_port, port_open, wait_until
from tests.test_web_burst import burst, procfile_command

REPOSITORY = Path(__file__).resolve().parents[1]
RUNSERVER = "python manage.py runserver 127.0.0.1:${PORT_WEB:-8000} --noreload"  # the Procfile's line before
BURSTS = (50, 200)


def _serve_and_burst(name: str, command: str, env: dict[str, str]) -> None:
    port = free_port()
    process = subprocess.Popen(
        ["sh", "-c", command],
        env={**env, "PORT_WEB": str(port)},
        cwd=REPOSITORY,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: port_open(port), what=f"{name} listening")
        for count in BURSTS:
            outcomes, seconds = burst(port=port, count=count)
            print(f"{name:9} burst {count:3}: {dict(sorted(outcomes.items()))} in {seconds:.1f} s", flush=True)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def run() -> None:
    directory = Path(tempfile.mkdtemp(prefix="amuxweb-bench-burst-"))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "PYTEST_", "REDIS_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="amuxweb.settings.local",
        DATABASE_URL=f"sqlite:///{directory / 'db.sqlite3'}",
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], env=env, cwd=REPOSITORY, check=True)
    for name, command in (("runserver", RUNSERVER), ("gunicorn", procfile_command("web"))):
        _serve_and_burst(name, command, env)
