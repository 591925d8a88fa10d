"""The servers and hub processes the fault suite starts itself, all on 127.0.0.1 (never the machine's shared ones).

- `RedisServer`: its own `redis-server` on a free port, no persistence, in a temporary directory;
- `PostgresCluster`: its own cluster, `initdb` into a temporary directory (as the `postgres` user when running as
  root: PostgreSQL refuses to run as root), started with `pg_ctl` on a free port and a socket in that directory;
- `HubProcess`: one process of the hub (gunicorn serving the webhook, a Celery worker, beat) in its own process
  group, so a fault can SIGKILL the whole of it (a prefork worker's children included) as a crash would.
Every process logs to its own file; a failure message quotes the tail.
"""

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
READY_TIMEOUT_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def wait_until(predicate: Callable[[], bool], *, what: str, timeout: float = READY_TIMEOUT_SECONDS, log=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not happen within {timeout:.0f} s" + (f"; log:\n{log()}" if log else ""))


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log, each cut at 300 characters (a traceback in a JSON line is one long line)."""
    if not path.exists():
        return ""
    return "\n".join(line[:300] for line in path.read_text(errors="replace").splitlines()[-lines:])


class RedisServer:
    """`redis-server` on a free port; `stop()` and `start()` again are the outage (same port, empty again)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.log_path = directory / "redis.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--dir", str(self.directory), "--logfile", str(self.log_path)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_until(lambda: port_open(self.port), what="redis-server listening", log=lambda: log_tail(self.log_path))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)
        self.process = None


class PostgresCluster:
    """A PostgreSQL cluster of the suite's own: initdb, pg_ctl start / restart -m fast / stop."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.port = free_port()
        self.log_path = directory / "postgres.log"
        self.bin = self._bin_directory()
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    @staticmethod
    def _bin_directory() -> Path:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        return Path(found[-1]).parent

    def database_url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *command: str) -> None:
        subprocess.run([*self.as_postgres, *command], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        if self.as_postgres:
            shutil.chown(self.directory, user="postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")

    def _options(self) -> str:
        # No durability needed for a throwaway cluster; a fast restart still checkpoints, so nothing is lost.
        return (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
        )

    def start(self) -> None:
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-o",
            self._options(),
            "-w",
            "start",
        )

    def restart(self) -> None:
        """`pg_ctl restart -m fast`: every connection is cut, in-flight transactions roll back."""
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-o", self._options(),
            "-m", "fast", "-w", "restart",
        )  # fmt: skip

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def create_database(self, name: str) -> None:
        self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)


class HubProcess:
    """One hub process in its own process group, logging to `<directory>/<name>.log`."""

    def __init__(self, *, name: str, command: list[str], env: dict[str, str], directory: Path, ready: str) -> None:
        self.name, self.command, self.env, self.ready = name, command, env, ready
        self.log_path = directory / f"{name}.log"
        self.process: subprocess.Popen | None = None
        self._offset = 0

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it (processes that start together import in parallel)."""
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, env=self.env, cwd=REPOSITORY, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self) -> None:
        def is_ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; log:\n{self.tail()}")
            return self.ready in self.log_path.read_text(errors="replace")[self._offset :]

        wait_until(is_ready, what=f"{self.name} ready", log=self.tail)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown handler runs, nothing in flight is acknowledged."""
        if self.is_running():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)

    def stop(self) -> None:
        if self.is_running():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


def temporary_directory(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
