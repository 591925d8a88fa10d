"""Feishu webhook intake under load: gunicorn + PostgreSQL + Redis, load from a second process on loopback.

The bench starts its own gunicorn (4 sync workers, `--preload` as in production) on a free port against its
own database (`amux_bench_webhook` on the PostgreSQL server of DATABASE_URL, else on 127.0.0.1:5432; a temporary SQLite file
only when no PostgreSQL answers) and a Redis broker (REDIS_URL, else redis://127.0.0.1:6379/5). No Celery worker
runs: the webhook stores and enqueues, which is exactly what Feishu waits for. A second process posts
pre-signed, encrypted `im.message.receive_v1` events (distinct message ids, plus 10% replays of earlier ones)
with a fixed number of client threads, then the same number of GETs of the trivial `/feishu/ping/` view on the
same server, in interleaved rounds. Reported: sustained requests/s, p50/p99 acknowledgement latency, and
ours/trivial throughput.

Where the time goes (issue 5; one process calling the WSGI handler on PostgreSQL + Redis, CPU time per request,
no profiler): the trivial view 0.10-0.12 ms; the webhook 0.78-0.95 ms = the durable INSERT through the ORM
(0.24-0.31 ms of Python, plus 0.21 ms of the PostgreSQL backend's CPU; 0.57 ms wall with the commit's WAL flush)
+ Celery's `apply_async` publish (0.33-0.37 ms; a hand-written LPUSH of the same message measured 0.14-0.25 ms
and moved the ratio from ~0.31 to ~0.34, not worth re-implementing kombu's envelope) + lark-oapi's checks and AES decryption (0.05-0.12 ms) + request handling; the bot row is
cached per process (0 queries). Under this bench (2 cores shared with the load client, PostgreSQL and Redis),
attributed by removing one step at a time on a scratch copy of the tree: without the store the webhook runs at
0.98x the trivial view, with the INSERT but no enqueue at 0.38x, with everything at 0.31-0.34x; an asynchronous
commit does not change it (0.33x: CPU, not the WAL flush). The trivial view costs ~0.5 ms of machine time per
request and the committed INSERT alone ~0.65 ms, so >= 0.5 is out of reach while the event is stored before the
200; the ratio is bounded by that guarantee, not by the bridge's own code.
Targets: p99 well under Feishu's 3 s; ratio >= 0.5. Bounded: EVENTS requests per phase, MAX_SECONDS each.
"""

import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import django

EVENTS = 2000
ROUNDS = 4
CONCURRENCY = 8
WORKERS = 4
MAX_SECONDS = 30  # per load run
DATABASE = "amux_bench_webhook"  # prefixed with DATABASE_URL's own name, so two people's runs never collide
DEFAULT_REDIS = "redis://127.0.0.1:6379/5"
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _postgres_url() -> str | None:
    import environ
    import psycopg

    configured = os.environ.get("DATABASE_URL", "")
    base = (
        configured
        if configured.startswith(("postgres://", "postgresql://"))
        else "postgres://postgres@127.0.0.1:5432/postgres"
    )
    parsed = environ.Env.db_url_config(base)
    global DATABASE
    if configured.startswith(("postgres://", "postgresql://")) and parsed["NAME"] not in ("", "postgres"):
        DATABASE = f"{parsed['NAME']}_bench_webhook"
    admin = (
        f"postgresql://{parsed['USER'] or 'postgres'}@{parsed['HOST'] or '127.0.0.1'}:{parsed['PORT'] or 5432}/postgres"
    )
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=3) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}"')
            connection.execute(f'CREATE DATABASE "{DATABASE}"')
    except psycopg.Error:
        return None
    return admin.rsplit("/", 1)[0].replace("postgresql://", "postgres://") + f"/{DATABASE}"


def _drop_postgres(url: str) -> None:
    import psycopg

    admin = url.rsplit("/", 1)[0].replace("postgres://", "postgresql://") + "/postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def _redis_ok(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_timeout=2).ping())
    except redis.RedisError:
        return False


def _server_env(database_url: str, redis_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "amuxweb.settings.base",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "SECRET_KEY": "bench-webhook-" + secrets.token_hex(16),
            "DEBUG": "false",
            "SECURE_SSL_REDIRECT": "false",
            "ALLOWED_HOSTS": "127.0.0.1",
            "LOG_LEVEL": "WARNING",
        }
    )
    return env


def _prepare(env: dict[str, str]) -> dict:
    """Migrate the bench database and create a bot with Feishu credentials (in a child, with the server's env)."""
    code = (
        "import django, json, secrets; django.setup();"
        "from django.core.management import call_command; call_command('migrate', verbosity=0);"
        "from django.contrib.auth import get_user_model;"
        "from agents.models import Bot, LLMModel, Provider;"
        "user=get_user_model().objects.create(username='bench');"
        "provider=Provider.objects.create(name='bench', kind='local_rules');"
        "model=LLMModel.objects.create(provider=provider, name='echo');"
        "bot=Bot.objects.create(slug='bench-bot', name='Bench', owner=user, primary_model=model,"
        " feishu_app_id='cli_bench', feishu_app_secret='s', feishu_encrypt_key='bench-encrypt-key',"
        " feishu_verification_token='bench-token', feishu_bot_open_id='ou_bench_bot');"
        "print(json.dumps({'slug': bot.slug, 'key': 'bench-encrypt-key', 'token': 'bench-token'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _requests(bot: dict, count: int) -> list[dict]:
    """Pre-signed, encrypted events; every tenth repeats an earlier message under a new event_id (F2)."""
    from amuxweb.feishu.signing import event_request_build, mention_entry, message_event_payload

    built = []
    for index in range(count):
        message_index = index - 5 if index % 10 == 9 else index
        payload = message_event_payload(
            verification_token=bot["token"],
            app_id="cli_bench",
            message_id=f"om_bench_{message_index}",
            chat_id="oc_bench",
            text=f"@_user_1 question {message_index}",
            mentions=[mention_entry(index=1, open_id="ou_bench_bot", name="Bench")],
        )
        signed = event_request_build(payload=payload, encrypt_key=bot["key"])
        built.append({"body": signed.body.decode(), "headers": signed.headers})
    return built


def _load(url: str, requests_file: str, concurrency: int, max_seconds: float) -> None:
    """Child process: POST (or GET when there is no body) every request with `concurrency` threads; print latencies."""
    from concurrent.futures import ThreadPoolExecutor

    items = json.loads(Path(requests_file).read_text())
    deadline = time.monotonic() + max_seconds

    def one(item: dict) -> tuple[float, int]:
        if time.monotonic() > deadline:
            return -1.0, 0
        data = item["body"].encode() if item.get("body") else None
        request = urllib.request.Request(
            url, data=data, headers=item.get("headers", {}), method="POST" if data else "GET"
        )
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError:
            status = 0  # timeout or refused: counted as a failure, not hidden
        return time.perf_counter() - started, status

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(one, items))
    elapsed = time.perf_counter() - started
    done = [(latency, status) for latency, status in results if latency >= 0]
    print(json.dumps({"elapsed": elapsed, "latencies": [d[0] for d in done], "statuses": [d[1] for d in done]}))


def _phase(url: str, items: list[dict]) -> dict:
    """One load run from a second process; raw latencies, statuses and elapsed time."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(items, handle)
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.bench_webhook",
                "--load",
                url,
                handle.name,
                str(CONCURRENCY),
                str(MAX_SECONDS),
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
    finally:
        Path(handle.name).unlink(missing_ok=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(runs: list[dict]) -> dict:
    latencies = sorted(latency for run in runs for latency in run["latencies"])
    count = len(latencies)
    return {
        "count": count,
        "rate": count / sum(run["elapsed"] for run in runs),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(count - 1, int(count * 0.99))] * 1000,
        "non_200": sum(1 for run in runs for status in run["statuses"] if status != 200),
    }


def _wait_ready(url: str, process: subprocess.Popen) -> None:
    for _ in range(150):
        if process.poll() is not None:
            raise RuntimeError("gunicorn exited early; see its log file")
        try:
            with urllib.request.urlopen(url, timeout=10):
                return
        except OSError:  # refused while booting, or the first (cold) request slower than the probe timeout
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not start")


def run() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    django.setup()
    redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
    if not _redis_ok(redis_url):
        print(f"skipped: no Redis at {redis_url} (the bench measures intake with a real broker)")
        return
    postgres_url = _postgres_url()
    sqlite_dir = None
    if postgres_url is None:
        sqlite_dir = Path(tempfile.mkdtemp(prefix="bench_webhook_"))
        database_url = f"sqlite:///{sqlite_dir / 'bench.sqlite3'}"
    else:
        database_url = postgres_url
    env = _server_env(database_url, redis_url)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = None
    try:
        bot = _prepare(env)
        gunicorn = str(Path(sys.executable).with_name("gunicorn"))
        server_log = tempfile.NamedTemporaryFile("w+", prefix="bench_webhook_gunicorn_", suffix=".log", delete=False)
        server = subprocess.Popen(
            [
                gunicorn,
                "amuxweb.wsgi",
                "--preload",
                "-w",
                str(WORKERS),
                "-b",
                f"127.0.0.1:{port}",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=server_log,  # a file, not a pipe: an unread pipe would block the server once full
        )
        _wait_ready(f"{base}/feishu/ping/", server)
        _phase(f"{base}/feishu/ping/", [{}] * 100)  # warm-up: imports, connections
        events = _requests(bot, EVENTS)
        trivial_runs, our_runs = [], []
        # Interleaved rounds, so a load spike from another process on the machine hits both views alike.
        per_round = EVENTS // ROUNDS
        for round_index in range(ROUNDS):
            trivial_runs.append(_phase(f"{base}/feishu/ping/", [{}] * per_round))
            chunk = events[round_index * per_round : (round_index + 1) * per_round]
            our_runs.append(_phase(f"{base}/feishu/webhook/{bot['slug']}/", chunk))
        trivial, ours = _summary(trivial_runs), _summary(our_runs)
        stored = subprocess.run(
            [
                sys.executable,
                "-c",
                "import django; django.setup(); from amuxweb.feishu.models import InboundEvent;"
                " print(InboundEvent.objects.count())",
            ],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)
            server_log.close()
            log_text = Path(server_log.name).read_text()
            Path(server_log.name).unlink(missing_ok=True)
            if "Traceback" in log_text:
                print("server errors:\n" + log_text[-3000:])
        import redis
        from django.conf import settings

        # The queued processing tasks no worker consumed.
        redis.Redis.from_url(redis_url).delete(settings.QUEUE_INTAKE)
        if postgres_url is not None:
            _drop_postgres(postgres_url)
        if sqlite_dir is not None:
            shutil.rmtree(sqlite_dir, ignore_errors=True)

    vendor = "PostgreSQL" if postgres_url else "SQLite"
    print(f"webhook intake: gunicorn {WORKERS} sync workers + {vendor} + Redis, {CONCURRENCY} client threads")
    print(f"{'view':<24}{'requests':>10}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'non-200':>9}")
    for name, row in (("trivial /feishu/ping/", trivial), ("webhook (store+enqueue)", ours)):
        print(
            f"{name:<24}{row['count']:>10}{row['rate']:>10.0f}{row['p50_ms']:>10.1f}{row['p99_ms']:>10.1f}"
            f"{row['non_200']:>9}"
        )
    ratio = ours["rate"] / trivial["rate"]
    print(f"stored events: {stored} (distinct messages; replays deduplicated)")
    print(
        f"ratio ours/trivial throughput: {ratio:.2f} (target >= 0.5); webhook p99 {ours['p99_ms']:.0f} ms (target << 3000)"
    )


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--load":
        _load(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    else:
        run()
