"""Start-up and memory (issue 11): CPU seconds and peak RSS of each kind of process, against a bare
`django.setup()` in the same run.

Two conditions, both on a copy of this checkout made for the run (so the checkout's own __pycache__, present or
not, changes nothing):
- cold: no bytecode for our packages, as a checkout runs under PYTHONDONTWRITEBYTECODE=1 (set on these machines,
  and forced here): every start recompiles amuxweb, agents, threadcontext and probe;
- deployed: after `python -m compileall` of those packages, which `make install` runs (Python reads a valid .pyc
  even under PYTHONDONTWRITEBYTECODE). This is what a deployed process pays; the goal is judged on it.
The installed libraries are precompiled in both (pip writes their .pyc).

Measured, each in a fresh child on its own SQLite file (migrated first, not counted), with the broker of
REDIS_URL or the embedded one; a command's CPU is the least of COMMAND_RUNS runs (its RSS the median), cold and
deployed taking turns so that both see the same load:
- `python -c "import django; django.setup()"`: the floor every process pays;
- `manage.py check` and `manage.py feishu_context_explain <root>` (which finds no decision): commands that call
  neither Feishu nor a provider, so neither lark-oapi nor a provider SDK may be imported (tests/test_startup.py);
- a gunicorn boot with `--preload` (the master loads the WSGI app, lark-oapi included, once; its worker is a
  fork) and a Celery worker boot (`worker_init` loads lark-oapi in the main process before the pool forks):
  CPU of the master/main process and of one worker up to the first answer / "ready", RSS at idle after it, and
  PSS (what a forked worker costs beyond the pages it shares with its master).
A command's CPU and peak RSS come from `os.wait4` (the child's own rusage); a server's from /proc.
Goals: <= 1.5 s of CPU for a command that calls neither Feishu nor a provider; <= 150 MB RSS for an idle web or
worker process. Bounded: every child has BOOT_TIMEOUT_SECONDS.

Before this bench's change every process imported lark-oapi (10,728 modules): `feishu_context_explain` took
13.5 s of CPU and 315 MB on a quiet machine (issue 11), `manage.py check` ~9 s CPU / 240 MB on this busy one.
Then (load ~2, no __pycache__: PYTHONDONTWRITEBYTECODE): setup 1.50 s, check 2.38 s, explain 2.10 s; with redis no
longer imported by tasks_enqueue and the explain command running no system checks: 1.38 s, 2.06 s, 1.41 s. What
check still pays over setup is the URLconf: DRF's compat module imports requests, psycopg (even on SQLite), yaml
and pygments, and drf-spectacular's plumbing rest_framework.test / unittest.mock.
Wave 5 (load 8, one run, least of 5): cold / deployed setup 2.00 / 1.80 s, check 3.07 / 2.70 s, explain 2.05 /
1.70 s: the compiled bytecode saves 0.20, 0.37 and 0.35 s (x0.90, x0.88, x0.83); at load ~1 the lead measured
cold 1.72 / 2.76 / 1.60 s. What a deployed setup still pays is not ours (each import timed alone after setup,
load ~5): Django's ORM, forms and templates ~0.4 s; celery + kombu (with yaml from kombu's serializer registry and
an entry-point scan) ~0.25 s, imported by django_celery_beat.models whatever amuxweb/__init__ does; django-celery-
beat's CrontabSchedule.timezone ~0.12 s (django-timezone-field lists the tz database twice and builds 598 ZoneInfo
choices when the model class is created; mfogel/django-timezone-field#156, open, makes the listing lazy); admin
autodiscover ~0.1 s, Django's own admins mostly (the services our admins import are imported anyway by the Feishu
app's ready(): < 5 ms more). `check` adds the URLconf, ~0.5 s: psycopg ~0.15 s via DRF's compat (even on SQLite),
DRF's serializers ~0.14 s, drf-spectacular's openapi + plumbing (rest_framework.test, django.test,
unittest.mock) ~0.2 s. The last is loaded by our API views' @extend_schema, which resolves the schema class as it
decorates, not by the schema views: a URLconf without them imports the same modules.
"""

import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOT_TIMEOUT_SECONDS = 120
COMMAND_CPU_GOAL_SECONDS = 1.5
IDLE_RSS_GOAL_MB = 150
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
HEAVY_SDKS = ("lark_oapi", "openai", "anthropic", "google.genai")
COMMAND_RUNS = 5
# What `make install` compiles (keep the two lists the same).
OUR_PACKAGES = ("amuxweb", "core", "agents", "threadcontext", "probe", "feishu", "console")
# Not copied into the run's checkout: the interpreter, history, caches, runtime files.
NOT_COPIED = (".venv", ".git", "__pycache__", "*.pyc", "var", "staticfiles", ".pytest_cache", ".ruff_cache")


@dataclass(frozen=True)
class Cost:
    name: str
    cpu_seconds: float
    rss_mb: float
    pss_mb: float | None = None
    uss_mb: float | None = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(database: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "amuxweb.settings.base",
            "DATABASE_URL": f"sqlite:///{database}",
            "SECRET_KEY": "bench-startup-" + secrets.token_hex(16),
            "DEBUG": "false",
            "SECURE_SSL_REDIRECT": "false",
            "ALLOWED_HOSTS": "127.0.0.1",
            "LOG_LEVEL": "WARNING",
            "PYTHONDONTWRITEBYTECODE": "1",  # a cold run stays cold: no child writes the .pyc the next one reads
        }
    )
    return env


def _checkout_copy(target: Path) -> Path:
    """This checkout's files (tracked or not, as they are now) without any bytecode: the cold condition."""
    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    (target / "var").mkdir()
    return target


def _bytecode_compile(root: Path) -> None:
    """The deployment step `make install` runs: from now on every start reads our modules' .pyc."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", *OUR_PACKAGES], cwd=root, check=True)


def _command_run(name: str, argv: list[str], env: dict[str, str], root: Path) -> Cost:
    """One child run to its end: its own user+system CPU and peak RSS (wait4's rusage is the child's alone)."""
    child = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, status, usage = os.wait4(child.pid, 0)
    finally:
        child.returncode = 0  # reaped by wait4: keep Popen from waiting again
    stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
    if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: the explain command's "no decision recorded"
        raise RuntimeError(f"{name} failed: {stderr[-1000:]}")
    return Cost(name, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


COMMANDS = (
    ("django.setup() (bare)", ["-c", "import django; django.setup()"]),
    ("manage.py check", ["manage.py", "check"]),
    ("manage.py feishu_context_explain", ["manage.py", "feishu_context_explain", "om_x"]),
)


def _commands_cost(roots: dict[str, Path], env: dict[str, str]) -> dict[str, list[Cost]]:
    """Each command in each condition, COMMAND_RUNS times, the conditions taking turns so both see the same load.
    A figure is the least of its runs: the work is the same every time and other processes only ever add to its
    CPU time (cache and core sharing; one run on a busy machine can be off by a third), as timeit's docs advise."""
    runs: dict[tuple[str, str], list[Cost]] = {}
    for _ in range(COMMAND_RUNS):
        for name, argv in COMMANDS:
            for condition, root in roots.items():
                cost = _command_run(f"{condition}: {name}", [sys.executable, *argv], env, root)
                runs.setdefault((condition, name), []).append(cost)
    return {
        condition: [
            Cost(
                f"{condition}: {name}",
                min(run.cpu_seconds for run in runs[condition, name]),
                statistics.median(run.rss_mb for run in runs[condition, name]),
            )
            for name, _ in COMMANDS
        ]
        for condition in roots
    }


def _proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _proc_memory_mb(pid: int) -> tuple[float, float, float]:
    """(RSS, PSS, USS) in MB: PSS divides each shared page among the processes that map it; USS is the pages
    this process alone holds (what one more forked worker costs)."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
            values[key] = int(rest.split()[0]) / 1024
    return values["Rss"], values["Pss"], values["Private_Clean"] + values["Private_Dirty"]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(value) for value in path.read_text().split()] if path.exists() else []


def _server_costs(label: str, main_pid: int) -> list[Cost]:
    time.sleep(1.0)  # idle: let the boot's last allocations settle before reading memory
    costs = []
    for role, pid in [("main", main_pid), *(("worker", child) for child in _children(main_pid)[:1])]:
        rss, pss, uss = _proc_memory_mb(pid)
        costs.append(Cost(f"{label} {role}", _proc_cpu_seconds(pid), rss, pss, uss))
    return costs


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _gunicorn_boot(env: dict[str, str], root: Path) -> list[Cost]:
    port = _free_port()
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    argv = [gunicorn, "amuxweb.wsgi:application", "--preload", "--workers", "1", "--bind", f"127.0.0.1:{port}"]
    server = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT_SECONDS
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/feishu/ping/", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("gunicorn did not answer")
            time.sleep(0.2)
        return _server_costs("gunicorn --preload", server.pid)
    finally:
        _stop(server)


def _celery_boot(env: dict[str, str], root: Path, log: Path) -> list[Cost]:
    celery = str(Path(sys.executable).with_name("celery"))
    argv = [celery, "-A", "amuxweb", "worker", "--concurrency", "1", "--without-gossip", "--without-mingle"]
    argv += ["--without-heartbeat", "--loglevel", "INFO", "--logfile", str(log)]
    worker = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT_SECONDS
        while not (log.exists() and " ready." in log.read_text(errors="replace")):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("the Celery worker did not become ready")
            time.sleep(0.2)
        return _server_costs("celery worker", worker.pid)
    finally:
        _stop(worker)


def _sdks_imported_by(argv: list[str], env: dict[str, str], root: Path) -> list[str]:
    code = (
        "import sys; from django.core.management import execute_from_command_line\n"
        f"try: execute_from_command_line({argv!r})\n"
        "except SystemExit: pass\n"
        f"print('SDKS=' + ','.join(name for name in {HEAVY_SDKS!r} if name in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    line = next(line for line in reversed(out.stdout.splitlines()) if line.startswith("SDKS="))
    return [name for name in line.removeprefix("SDKS=").split(",") if name]


def _table_print(costs: list[Cost], bare: Cost) -> None:
    for cost in costs:
        shared = "".join(
            f" {value:7.0f}" if value is not None else f" {'-':>7}" for value in (cost.pss_mb, cost.uss_mb)
        )
        ratio = cost.cpu_seconds / bare.cpu_seconds if bare.cpu_seconds else 0.0
        print(f"{cost.name:48} {cost.cpu_seconds:7.2f} {ratio:7.2f} {cost.rss_mb:7.0f}{shared}")


def run() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="amux-bench-startup-"))
    try:
        cold_root = _checkout_copy(scratch / "cold")
        root = _checkout_copy(scratch / "deployed")
        _bytecode_compile(root)
        env = _env(scratch / "bench.sqlite3")
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=root, env=env, check=True, capture_output=True
        )
        commands = _commands_cost({"cold": cold_root, "deployed": root}, env)
        cold, deployed = commands["cold"], commands["deployed"]
        servers = [*_gunicorn_boot(env, root), *_celery_boot(env, root, scratch / "celery.log")]
        print(
            f"cold: our packages recompiled at every start (no .pyc, PYTHONDONTWRITEBYTECODE=1); deployed: after "
            f"`compileall {' '.join(OUR_PACKAGES)}` (make install). Commands: least CPU of {COMMAND_RUNS} runs; "
            f"x bare: against the bare setup of the same condition; servers run deployed. "
            f"Load average {os.getloadavg()[0]:.2f}."
        )
        print(f"{'process':48} {'CPU s':>7} {'x bare':>7} {'RSS MB':>7} {'PSS MB':>7} {'USS MB':>7}")
        _table_print(cold, cold[0])
        _table_print(deployed + servers, deployed[0])
        print(
            "deployed / cold (what the compiled bytecode saves): "
            + ", ".join(
                f"{after.name.removeprefix('deployed: ')} {after.cpu_seconds / before.cpu_seconds:.2f}"
                f" ({before.cpu_seconds - after.cpu_seconds:.2f} s less)"
                for before, after in zip(cold, deployed, strict=True)
            )
        )
        for argv in (["manage.py", "check"], ["manage.py", "feishu_context_explain", "om_x"]):
            print(f"heavy SDKs imported by {' '.join(argv[1:])}: {_sdks_imported_by(argv, env, root) or 'none'}")
        print(
            f"goal (deployed): commands <= {COMMAND_CPU_GOAL_SECONDS} s CPU: "
            + ", ".join(f"{cost.name.removeprefix('deployed: ')} {cost.cpu_seconds:.2f} s" for cost in deployed[1:])
            + f"; idle web/worker <= {IDLE_RSS_GOAL_MB} MB RSS: "
            + ", ".join(f"{cost.name} {cost.rss_mb:.0f} MB" for cost in servers)
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
