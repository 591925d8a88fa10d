"""The whole pipeline under load (issue 11): webhook -> intake task -> turn -> reply at the Feishu stub.

Started here, all on 127.0.0.1: gunicorn (2 sync workers), 1 then 2 Celery worker processes (each
`--pool threads`, WORKER_THREADS threads: a turn mostly waits for the model), beat, PostgreSQL (a database of
this bench's own, dropped afterwards) and Redis (REDIS_URL, else DEFAULT_REDIS; its queues are emptied), and in a
child process the Feishu stub and the OpenAI-compatible LLM stub answering after MODEL_LATENCY_SECONDS. 10 bots
(replies as plain text, no receipt reaction) in 50 groups, 10 of them discuss groups (the judge is the local rules
provider: no model I/O). A second process offers an open-loop mix at each rate for PHASE_SECONDS: @-mentions
opening topics (50 %), @-mentions inside a topic (15 %), un-addressed messages in discuss groups (15 %), DMs (10 %)
and REST posts (10 %).

Per rate: offered and delivered msg/s, whether the backlog (Redis queue depth + pending inbound events + unfinished
turns, sampled every second) stayed flat, p50/p99 from the webhook POST to the reply at the stub minus the model's
latency, CPU ms per message of the web, worker and PostgreSQL processes (/proc, PostgreSQL backends of this
database only), statements per task by outcome (counted in the workers), and sequential scans per message by table
(pg_stat_user_tables). Every figure is a ratio or count within one run; the machine is shared, so the load average
is printed beside them. Bounded: PHASE_SECONDS per rate, DRAIN_SECONDS at most to drain, leftovers purged.
Flags: `--rates 5,20`, `--seconds 20`, `--workers 1,2` (worker sets, one after another), `--layout procfile` (the
default: per set one `worker` prefork process with SHORT_CONCURRENCY children for every queue but turns and N
`turns` workers with `--turn-threads` threads, as the Procfile runs them) or `--layout shared` (issue 11's: N
workers with WORKER_THREADS threads, every queue), `--model-seconds 0.3` (the LLM stub's time per answer, streamed
over that time when asked for a stream), `--cards` (the bots answer in streaming cards: every turn streams, and a
reply is complete when its card is closed). Slow models (issue 28, goal 1):
`python -m bench pipeline --model-seconds 10 --cards --rates 5,10,20 --seconds 40 --workers 1`; it then also
reports turns in flight, PostgreSQL connections to the hub's database (open, and not idle) and RSS/PSS of the hub's
processes, and CPU per message per role (web, worker, turns, beat, postgres). `--hot-topic 3` adds one topic receiving 3 @-messages per second and reports the latency one turn at a time per
conversation adds to them (bench/hot_topic.py; issue 22). `--floors` first runs
`bench floors` in the same run and prints each phase's hub CPU per message as a ratio against the floor of that
phase's own work (its requests, tasks, statements, model calls and replies per message). With AMUX_BENCH_PYSPY=<path to a py-spy binary> (not a
requirement: `pip install --target /tmp/pyspy py-spy`), each worker is sampled during every measured phase (only
stacks holding the GIL: its CPU) and the report adds the functions with the most samples, self and inclusive.
"""

import contextlib
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import hot_topic, hygiene
from bench.answers import answered_at, percentile, phase_turns

RATES = (5, 20, 50, 100)
PHASE_SECONDS = 20
WORKER_SETS = (1, 2)
WORKER_THREADS = 16
MODEL_LATENCY_SECONDS = 0.3
STREAM_WORDS = 40
DRAIN_SECONDS = 30
# `--layout procfile` (the default): the Procfile's two workers, `worker` (prefork, SHORT_CONCURRENCY children,
# every queue but turns) and per worker set that many `turns` workers (threads, `--turn-threads`); `--layout
# shared`: the issue-11 layout, each worker every queue with WORKER_THREADS threads.
SHORT_CONCURRENCY = 2
TURN_THREADS = 500
WARMUP_RATE, WARMUP_SECONDS = 4, 8
BOTS, GROUPS, DISCUSS_EVERY = 10, 50, 5  # every 5th group is a discuss group
DEFAULT_REDIS = "redis://127.0.0.1:6379/7"
QUERY_COUNTS_KEY = "bench_pipeline:queries"
ROOT = Path(__file__).resolve().parents[1]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _flag(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv[:-1] else default


def _model_seconds() -> float:
    """How long the model stub takes per answer (`--model-seconds`, also read by the stubs' child)."""
    return float(os.environ.get("AMUX_BENCH_MODEL_SECONDS") or _flag("--model-seconds", str(MODEL_LATENCY_SECONDS)))


def _groups() -> int:
    """`--groups N`: the bench's groups (every DISCUSS_EVERY-th a discuss group). One turn runs at a time per
    conversation (issue 22), so a slow model needs at least rate x model seconds conversations to keep its turns
    in flight: `--model-seconds 10 --rates 20` wants `--groups 500`."""
    return int(_flag("--groups", str(GROUPS)))


def _rest_threads() -> int:
    """REST threads per bot, as many as each bot has groups: the REST posts spread like the group messages."""
    return max(1, _groups() // BOTS)


def _cards() -> bool:
    """`--cards`: the bots answer in streaming cards (markdown_card), so every turn streams its model's answer."""
    return "--cards" in sys.argv


# --- the stubs' child process ----------------------------------------------------------------------------
def _serve_stubs(directory: str) -> None:
    """Child: both stubs until SIGTERM, then every reply the Feishu stub took (parent message id, monotonic time)."""
    from tests.stubs.feishu_server import FeishuStubServer
    from tests.stubs.llm_servers import LLMStubServer, StubResponse, openai_chat_body

    feishu = FeishuStubServer().start()
    llm = LLMStubServer().start()
    seconds = _model_seconds()
    answer = "noted: " + " ".join(f"w{index}" for index in range(STREAM_WORDS))

    def respond(request) -> StubResponse:
        # Streamed (a card bot asks for a stream): about STREAM_WORDS text events spread over the model's time;
        # whole after the same time otherwise.
        if request.json.get("stream") is True:
            return StubResponse(body=openai_chat_body(text=answer), chunk_delay_seconds=seconds / (STREAM_WORDS + 4))
        return StubResponse(body=openai_chat_body(text="noted"), delay_seconds=seconds)

    llm.respond_with("openai_chat", respond)
    stopping, dump = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: (stopping.set(), dump.set()))
    signal.signal(signal.SIGUSR1, lambda *_: dump.set())  # after each phase: what has arrived so far
    Path(directory, "ports.json").write_text(json.dumps({"feishu": feishu.url, "llm": llm.url("/v1")}))
    while not stopping.is_set():
        dump.wait()
        dump.clear()
        with feishu.stub.lock:
            requests = list(feishu.stub.requests)
        at = _reply_times(requests)
        counts: dict[str, int] = {}
        for request in requests:
            if request.route == "reply" and request.status == 200:
                parent = request.path.split("/")[-2]
                counts[parent] = counts.get(parent, 0) + 1
        written = Path(directory, "replies.json.part")
        written.write_text(json.dumps({"replies": at, "reply_counts": counts, "llm_calls": len(llm.requests)}))
        written.rename(Path(directory, "replies.json"))


def _reply_times(requests: list) -> dict[str, float]:
    """{parent message id: when its reply was complete}: the reply itself, or for a streaming card the last
    request that touched the card (its close)."""
    last_touch: dict[str, float] = {}
    for request in requests:
        if request.route in ("card_content", "card_settings") and request.status == 200:
            card_id = request.path.split("/")[-2]
            last_touch[card_id] = max(last_touch.get(card_id, 0.0), request.at)
    at = {}
    for request in requests:
        if request.route == "reply" and request.status == 200:
            body = request.body if isinstance(request.body, dict) else {}
            content = body.get("content") or ""
            card_id = ""
            if body.get("msg_type") == "interactive" and '"card_id"' in content:
                card_id = str((json.loads(content).get("data") or {}).get("card_id") or "")
            at[request.path.split("/")[-2]] = max(request.at, last_touch.get(card_id, 0.0))
    return at


def _replies(directory: Path, stubs: subprocess.Popen) -> dict:
    """{parent message id: monotonic time its reply reached the Feishu stub}, and the LLM stub's call count."""
    answer = Path(directory, "replies.json")
    answer.unlink(missing_ok=True)
    stubs.send_signal(signal.SIGUSR1)
    _wait_for(answer.exists, "the stubs' reply log", seconds=60)
    return json.loads(answer.read_text())


# --- query counting inside a worker (imported by `celery worker --include bench.bench_pipeline`) ---------------
def _count_worker_queries() -> None:
    import redis
    from celery.signals import task_postrun, task_prerun, worker_ready
    from django.db import connection

    counts = threading.local()
    store = redis.Redis.from_url(os.environ["REDIS_URL"])

    def counter(execute, sql, params, many, context):
        counts.value = getattr(counts, "value", 0) + 1
        return execute(sql, params, many, context)

    @worker_ready.connect(weak=False)
    def _ready(**_) -> None:
        Path(os.environ["AMUX_BENCH_READY_FILE"]).touch()  # the log says "ready." only at INFO

    @task_prerun.connect(weak=False)
    def _start(**_) -> None:
        counts.value = 0
        if counter not in connection.execute_wrappers:
            connection.execute_wrappers.append(counter)

    @task_postrun.connect(weak=False)
    def _finish(task=None, retval=None, **_) -> None:
        key = f"{task.name.rsplit('.', 1)[-1]}:{retval if isinstance(retval, str) else type(retval).__name__}"
        # One round trip: this hook's own CPU counts as the worker's (it was 1.7 % of its samples as two calls).
        counted = store.pipeline(transaction=False)
        counted.hincrby(QUERY_COUNTS_KEY, f"{key}:tasks", 1)
        counted.hincrby(QUERY_COUNTS_KEY, f"{key}:queries", getattr(counts, "value", 0))
        counted.execute()


if os.environ.get("AMUX_BENCH_COUNT_QUERIES") == "1":
    _count_worker_queries()


# --- setup -----------------------------------------------------------------------------------------------
def _database(suffix: str = "bench_pipeline") -> tuple[str, str]:
    """(the bench database's URL, the server's admin URL): `<DATABASE_URL name>_<suffix>`, created empty."""
    import environ
    import psycopg

    configured = os.environ.get("DATABASE_URL", "")
    if not configured.startswith(("postgres://", "postgresql://")):
        configured = "postgres://postgres@127.0.0.1:5432/amuxweb"
    parsed = environ.Env.db_url_config(configured)
    server = f"postgresql://{parsed['USER'] or 'postgres'}@{parsed['HOST'] or '127.0.0.1'}:{parsed['PORT'] or 5432}"
    name = f"{parsed['NAME'] or 'amuxweb'}_{suffix}"
    with psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}".replace("postgresql://", "postgres://"), f"{server}/postgres"


PREPARE = """
import django, json, sys; django.setup()
from django.core.management import call_command; call_command("migrate", verbosity=0)
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from agents.models import Bot, LLMModel, Provider, Thread
from threadcontext.models import Workspace
llm, bots, groups, reply_format = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[5]
user = get_user_model().objects.create(username="bench")
token = Token.objects.create(user=user).key
model = LLMModel.objects.create(provider=Provider.objects.create(name="stub", kind="openai_chat", base_url=llm,
    api_key="k", max_retries=0), name="gpt-bench", context_window=32000)
judge = LLMModel.objects.create(provider=Provider.objects.create(name="rules", kind="local_rules"), name="judge",
    supports_tool_calls=True)
out = {"token": token, "bots": [], "groups": []}
for index in range(bots):
    key = f"bench-key-{index}"
    bot = Bot.objects.create(slug=f"bench-{index}", name=f"Bench {index}", owner=user, primary_model=model,
        feishu_app_id=f"cli_bench_{index}", feishu_app_secret="s", feishu_encrypt_key=key,
        feishu_verification_token=f"token-{index}", feishu_bot_open_id=f"ou_bench_{index}",
        reply_format=reply_format, receipt_emoji="", discuss_probe_mode="model", discuss_probe_model=judge,
        probe_debounce_initial_ms=500, probe_debounce_max_ms=2000)
    rest = [Thread.objects.create(bot=bot, runtime_mode="chat", channel="rest", title=f"bench {n}").pk
        for n in range(int(sys.argv[6]))]
    out["bots"].append({"slug": bot.slug, "app_id": bot.feishu_app_id, "key": key, "token": f"token-{index}",
        "open_id": bot.feishu_bot_open_id, "rest_threads": rest})
for index in range(groups):
    discuss = index % int(sys.argv[4]) == int(sys.argv[4]) - 1
    Workspace.objects.create(bot_profile=f"bench-{index % bots}", chat_id=f"oc_bench_{index}", chat_mode="group",
        group_message_type="chat", reply_mode="discuss" if discuss else "", is_created_automatically=True)
    out["groups"].append({"chat_id": f"oc_bench_{index}", "bot": index % bots, "discuss": discuss})
print(json.dumps(out))
"""


def _env(database_url: str, redis_url: str, feishu_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "amuxweb.settings.base",
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "SECRET_KEY": "bench-pipeline-" + secrets.token_hex(16),
        "DEBUG": "false",
        "SECURE_SSL_REDIRECT": "false",
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
        "FEISHU_DOMAIN": feishu_url,
        # Only this phase's messages: a purged phase's leftovers are never swept back into the next.
        "FEISHU_SWEEP_PENDING_AFTER_SECONDS": "3600",
        "AMUX_BENCH_HOT_TOPIC": str(hot_topic.hot_rate()),  # the load child builds the hot topic's messages
    }


def _spawn(command: list[str], env: dict, log_dir: Path, name: str, **extra) -> subprocess.Popen:
    log = (log_dir / f"{name}.log").open("ab")  # a file, not a pipe: an unread pipe blocks the child once full
    return subprocess.Popen(
        command, cwd=ROOT, env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _wait_for(predicate, what: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not start within {seconds:.0f} s")


# --- load (the second process) ---------------------------------------------------------------------------
def _messages(setup: dict, rate: int, seconds: int, phase: str) -> list[dict]:
    """The open-loop mix of one phase (and the hot topic's messages, `--hot-topic`), each with the second of the
    phase it is posted at, signed and encrypted before the clock starts."""
    mention_groups = [group for group in setup["groups"] if not group["discuss"]]
    discuss_groups = [group for group in setup["groups"] if group["discuss"]]
    opened: list[tuple[dict, str]] = []
    items = []
    for index in range(rate * seconds):
        slot, message_id, at = index % 20, f"om_{phase}_{index}", index / rate
        where: dict = {}
        if slot < 10 or (slot < 13 and not opened):
            kind, group = "mention", mention_groups[index % len(mention_groups)]
        elif slot < 13:
            kind, (group, root) = "topic", opened[index % len(opened)]
            where = {"root_id": root, "parent_id": root, "thread_id": f"omt_{root}"}
        elif slot < 16:
            kind, group = "discuss", discuss_groups[index % len(discuss_groups)]
        elif slot < 18:
            dm_chat = f"oc_dm_{phase}_{index % len(setup['groups'])}"
            kind, group = "dm", {"chat_id": dm_chat, "bot": index % BOTS}
            where = {"chat_type": "p2p"}
        else:
            bot = setup["bots"][index % BOTS]
            items.append(
                {
                    "kind": "rest",
                    "id": message_id,
                    "at": at,
                    "url": f"/api/v1/threads/{bot['rest_threads'][index // BOTS % len(bot['rest_threads'])]}/messages/",
                    "body": json.dumps({"content": f"rest question {index}"}),
                    "headers": {"Authorization": f"Token {setup['token']}", "Content-Type": "application/json"},
                }
            )
            continue
        addressed = kind in ("mention", "topic")
        text = f"question {index} about the release"
        items.append(_feishu_item(setup, group, kind, message_id, at, text, addressed=addressed, where=where))
        if kind == "mention":
            opened.append((group, message_id))
    if hot_topic.hot_rate():
        items += _hot_topic_items(setup, mention_groups[0], seconds, phase)
    return sorted(items, key=lambda item: item["at"])


def _hot_topic_items(setup: dict, group: dict, seconds: int, phase: str) -> list[dict]:
    """`--hot-topic N`: an @ opening a topic at the phase's start, then N @-messages per second in that topic."""
    root = hot_topic.hot_root_id(phase)
    where = {"root_id": root, "parent_id": root, "thread_id": f"omt_{root}"}
    items = [_feishu_item(setup, group, "hotroot", root, 0.0, "a topic that gets busy", addressed=True, where={})]
    for index, at in enumerate(hot_topic.hot_schedule(hot_topic.hot_rate(), seconds)):
        message_id, text = hot_topic.hot_message_id(phase, index), f"and one more thing, number {index}"
        items.append(_feishu_item(setup, group, "hot", message_id, at, text, addressed=True, where=where))
    return items


def _feishu_item(
    setup: dict, group: dict, kind: str, message_id: str, at: float, text: str, *, addressed: bool, where: dict
) -> dict:
    """One message to the group's bot as Feishu would post it to the webhook: signed, encrypted."""
    from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload

    bot = setup["bots"][group["bot"]]
    sender = sum(map(ord, message_id)) % 30
    payload = message_event_payload(
        verification_token=bot["token"],
        app_id=bot["app_id"],
        message_id=message_id,
        chat_id=group["chat_id"],
        text=("@_user_1 " if addressed else "") + text,
        sender_open_id=f"ou_user_{sender}",
        mentions=[mention_entry(index=1, open_id=bot["open_id"], name="Bench")] if addressed else [],
        **where,
    )
    # Stamped with the second it will be posted at, not now: a long run (the soak) posts its last messages far
    # beyond the webhook's max age, and the hub rightly refuses a stale stamp.
    signed = event_request_build(payload=payload, encrypt_key=bot["key"], timestamp=int(time.time() + at))
    return {
        "kind": kind,
        "id": message_id,
        "at": at,
        "url": f"/feishu/webhook/{bot['slug']}/",
        "body": signed.body.decode(),
        "headers": signed.headers,
    }


def _load(base: str, setup_file: str, rate: int, seconds: int, phase: str, out_file: str) -> None:
    """Child: offer the phase's messages at `rate`/s (open loop), record when each was posted and its status."""
    import django

    django.setup()
    items = _messages(json.loads(Path(setup_file).read_text()), rate, seconds, phase)

    def post(item: dict) -> dict:
        request = urllib.request.Request(
            base + item["url"], data=item["body"].encode(), headers=item["headers"], method="POST"
        )
        sent = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError:
            status = 0
        return {"kind": item["kind"], "id": item["id"], "sent": sent, "ack": time.monotonic() - sent, "status": status}

    started = time.monotonic()
    futures = []
    with ThreadPoolExecutor(max_workers=64) as pool:
        for item in items:
            delay = started + item["at"] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(post, item))
    Path(out_file).write_text(json.dumps({"started": started, "posts": [future.result() for future in futures]}))


# --- measuring -------------------------------------------------------------------------------------------
def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def _rss_mib(pid: int) -> float:
    """The process's resident memory in MiB (RSS: pages shared by fork count in each process)."""
    return _proc_kib(f"/proc/{pid}/status", "VmRSS:") / 1024


def _pss_mib(pid: int) -> float:
    """Its proportional share (PSS: a page shared by n processes counts 1/n in each): the sum is the real total."""
    return _proc_kib(f"/proc/{pid}/smaps_rollup", "Pss:") / 1024


def _proc_kib(path: str, field: str) -> float:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0.0


def _tree(pid: int) -> list[int]:
    pids, index = [pid], 0
    while index < len(pids):
        for task in Path(f"/proc/{pids[index]}/task").glob("*"):
            try:
                pids += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                pass
        index += 1
    return pids


class Sampler(threading.Thread):
    """Every second: queue depth and pending rows (the backlog), and each process's CPU time (last value seen)."""

    def __init__(self, database_url: str, redis_url: str, groups: dict[str, list[subprocess.Popen]]) -> None:
        super().__init__(daemon=True)
        import psycopg
        import redis
        from django.conf import settings

        self.db = psycopg.connect(database_url.replace("postgres://", "postgresql://"), autocommit=True)
        self.redis = redis.Redis.from_url(redis_url)
        self.queues = list(settings.CELERY_TASK_QUEUES)
        self.groups = groups
        self.cpu: dict[tuple[str, int], float] = {}
        self.backlog: list[tuple[float, int, int]] = []  # (time, queue depth, pending rows)
        # (time, PostgreSQL connections open to this database, of them not idle, RSS MiB of the hub's processes,
        # turns running or replied = in flight, PSS MiB of the hub's processes)
        self.resources: list[tuple[float, int, int, float, int, float]] = []
        self.rss_by_pid: dict[int, float] = {}
        self.rss_history: list[
            tuple[float, dict[tuple[str, int], float]]
        ] = []  # every sample: (time, {(role, pid): MiB})
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def sample(self) -> tuple[int, int]:
        depth = sum(self.redis.llen(queue) for queue in self.queues)
        rows = self.db.execute(
            # One statement per partial or status index: the sampler's own reads walk no table.
            "SELECT (SELECT count(*) FROM feishu_inboundevent WHERE status = 'pending')"
            " + (SELECT count(*) FROM feishu_inboundevent WHERE status = 'processing')"
            " + (SELECT count(*) FROM agents_turn WHERE status IN ('queued', 'running', 'replied'))"
        ).fetchone()[0]
        activity = self.db.execute(
            "SELECT pid, state FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        backends = [pid for pid, _ in activity]
        in_flight = self.db.execute(
            "SELECT count(*) FROM agents_turn WHERE status IN ('running', 'replied')"
        ).fetchone()[0]
        rss: dict[int, float] = {}
        by_process: dict[tuple[str, int], float] = {}
        pss = 0.0
        with self.lock:
            for group, processes in self.groups.items():
                for process in processes:
                    for pid in _tree(process.pid):
                        self.cpu[(group, pid)] = _cpu_seconds(pid) or self.cpu.get((group, pid), 0.0)
                        rss[pid] = _rss_mib(pid)
                        by_process[(group, pid)] = rss[pid]
                        pss += _pss_mib(pid)
            for pid in backends:
                self.cpu[("postgres", pid)] = _cpu_seconds(pid) or self.cpu.get(("postgres", pid), 0.0)
            now = time.monotonic()
            self.backlog.append((now, depth, rows))
            busy = sum(1 for _, state in activity if state != "idle")
            self.resources.append((now, len(activity), busy, sum(rss.values()), in_flight, pss))
            self.rss_by_pid = rss
            self.rss_history.append((now, by_process))
        return depth, rows

    def cpu_by_group(self) -> dict[str, float]:
        with self.lock:
            totals: dict[str, float] = {}
            for (group, _), seconds in self.cpu.items():
                totals[group] = totals.get(group, 0.0) + seconds
            return totals

    def seq_scans(self) -> dict[str, int]:
        rows = self.db.execute("SELECT relname, seq_scan FROM pg_stat_user_tables").fetchall()
        return dict(rows)

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            self.sample()


def _profile_start(context: dict, phase: str) -> list[tuple[subprocess.Popen, Path]]:
    """py-spy on each worker for the phase (AMUX_BENCH_PYSPY): raw stacks, only those holding the GIL."""
    binary = os.environ.get("AMUX_BENCH_PYSPY")
    if not binary:
        return []
    recorders = []
    for process in context["workers"]:
        out = Path(os.environ.get("AMUX_BENCH_PYSPY_OUT") or context["tmp"], f"profile_{phase}_{process.pid}.txt")
        command = [binary, "record", "--pid", str(process.pid), "--gil", "--nolineno", "--format", "raw"]
        recorder = subprocess.Popen(
            command + ["--rate", "100", "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        recorders.append((recorder, out))
    return recorders


def _profile_report(recorders: list[tuple[subprocess.Popen, Path]], top: int = 25) -> str:
    """Stop the recorders; the frames with the most samples (self, then inclusive), as shares of all samples."""
    self_counts: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for recorder, out in recorders:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        recorder.wait(timeout=60)
        for line in out.read_text().splitlines() if out.exists() else []:
            stack, _, count = line.rpartition(" ")
            frames, samples = stack.split(";"), int(count)
            total += samples
            self_counts[frames[-1]] = self_counts.get(frames[-1], 0) + samples
            for frame in set(frames):
                inclusive[frame] = inclusive.get(frame, 0) + samples
    if not total:
        return "  profile: no samples"

    def ranked(counts: dict[str, int]) -> str:
        best = sorted(counts.items(), key=lambda item: -item[1])[:top]
        return "\n".join(f"    {100 * n / total:5.1f}%  {frame}" for frame, n in best)

    return f"  profile ({total} GIL samples at 100/s), self:\n{ranked(self_counts)}\n  inclusive:\n{ranked(inclusive)}"


def _phase(context: dict, rate: int, seconds: int, phase: str) -> dict:
    sampler, redis_client = context["sampler"], context["sampler"].redis
    redis_client.delete(QUERY_COUNTS_KEY)
    cpu_before, scans_before = sampler.cpu_by_group(), sampler.seq_scans()
    sampler.sample()
    recorders = _profile_start(context, phase) if context.get("profiled") else []
    out_file = Path(context["tmp"], f"load_{phase}.json")
    subprocess.run(
        [sys.executable, "-m", "bench.bench_pipeline", "--load", context["base"], context["setup_file"]]
        + [str(rate), str(seconds), phase, str(out_file)],
        cwd=ROOT,
        env=context["env"],
        check=True,
        timeout=seconds * 6 + 900,  # signing and encrypting every message first is slow on a busy machine
    )
    load = json.loads(out_file.read_text())
    load_end = time.monotonic()
    # With a slow model the first model_seconds only fill the pipeline with turns in flight: the backlog's trend
    # is judged after them.
    steady = load["started"] + _model_seconds() + 2
    with sampler.lock:
        during = [depth + rows for at, depth, rows in sampler.backlog if steady <= at <= load_end]
        resources = [sample for sample in sampler.resources if load["started"] <= sample[0] <= load_end]
    drained_after = None
    while time.monotonic() - load_end < _drain_seconds():
        depth, rows = sampler.sample()
        if depth + rows == 0:
            drained_after = time.monotonic() - load_end
            break
        time.sleep(0.5)
    time.sleep(1.5)  # the statistics collector and the last replies
    sampler.sample()
    cpu_after, scans_after = sampler.cpu_by_group(), sampler.seq_scans()
    profile = _profile_report(recorders) if recorders else ""
    # Every turn of the phase's messages, to credit a message collected into another turn with that turn's reply.
    turns = phase_turns(sampler.db, prefix=f"om_{phase}_")
    left = _purge(context)
    counts = {key.decode(): int(value) for key, value in redis_client.hgetall(QUERY_COUNTS_KEY).items()}
    posts = load["posts"]
    return {
        "rate": rate,
        "posts": posts,
        "elapsed": max(post["sent"] for post in posts) - load["started"],
        "load_end": load_end,
        "during": during,
        "resources": resources,
        "drained_after": drained_after,
        "left": left,
        "cpu": {group: cpu_after.get(group, 0.0) - cpu_before.get(group, 0.0) for group in cpu_after},
        "scans": {t: scans_after.get(t, 0) - scans_before.get(t, 0) for t in scans_after},
        "queries": counts,
        "profile": profile,
        "turns": [
            (turn_id, source, status, [int(c) for c in collected or []]) for turn_id, source, status, collected in turns
        ],
    }


def _layout_text(workers: int, layout: str) -> str:
    if layout == "shared":
        return f"{workers} worker(s) x {WORKER_THREADS} threads, every queue"
    threads = int(_flag("--turn-threads", str(TURN_THREADS)))
    return f"1 worker (prefork x {SHORT_CONCURRENCY}) + {workers} turns worker(s) x {threads} threads"


def _workers_start(workers: int, layout: str, env: dict, tmp: Path) -> tuple[list[subprocess.Popen], list[Path]]:
    """The worker processes of one worker set and the files each touches when ready."""
    celery = [str(Path(sys.executable).parent / "celery"), "-A", "amuxweb", "worker", "--without-gossip"]
    common = ["--without-mingle", "--loglevel=WARNING", "--include=bench.bench_pipeline"]
    if layout == "shared":
        commands = [
            ["--pool=threads", f"--concurrency={WORKER_THREADS}", f"--hostname=pipeline{index}-{os.getpid()}@%h"]
            for index in range(workers)
        ]
    else:
        threads = int(_flag("--turn-threads", str(TURN_THREADS)))
        commands = [
            ["-Q", "intake,deliveries,probe,maintenance", f"--concurrency={SHORT_CONCURRENCY}"]
            + [f"--hostname=short-{os.getpid()}@%h"]
        ] + [
            ["-Q", "turns", "--pool=threads", f"--concurrency={threads}", f"--hostname=turns{index}-{os.getpid()}@%h"]
            for index in range(workers)
        ]
    started, ready = [], []
    for index, args in enumerate(commands):
        ready.append(tmp / f"ready{workers}_{index}")
        started.append(
            _spawn(
                celery + args + common,
                env,
                tmp,
                f"worker{workers}_{index}",
                AMUX_BENCH_COUNT_QUERIES="1",
                AMUX_BENCH_READY_FILE=str(ready[-1]),
            )
        )
    return started, ready


def _drain_seconds() -> float:
    return max(DRAIN_SECONDS, 2 * _model_seconds() + 10)


def _purge(context: dict) -> int:
    """Drop what a phase left undone (empty queues, its rows finished), so the next phase starts from zero."""
    sampler = context["sampler"]
    for queue in sampler.queues:
        sampler.redis.delete(queue)
    left = sampler.db.execute(
        "WITH events AS (UPDATE feishu_inboundevent SET status = 'failed', error = 'bench purge'"
        " WHERE status IN ('pending', 'processing') RETURNING 1),"
        " turns AS (UPDATE agents_turn SET status = 'failed', error = 'bench purge'"
        " WHERE status IN ('queued', 'running', 'replied') RETURNING 1)"
        " SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM turns)"
    ).fetchone()[0]
    sampler.db.execute("UPDATE feishu_discusswake SET status = 'done' WHERE status IN ('pending', 'running')")
    return left


def _report(result: dict, replies: dict[str, float], layout: str) -> str:
    posts, rate = result["posts"], result["rate"]
    count = len(posts)
    expected = [post for post in posts if post["kind"] in ("mention", "topic", "dm")]
    overheads = {
        kind: [
            replies[post["id"]] - post["sent"] - _model_seconds()
            for post in expected
            if post["kind"] == kind and post["id"] in replies
        ]
        for kind in ("mention", "topic", "dm")
    }
    every = [value for values in overheads.values() for value in values]
    answered = sum(len(values) for values in overheads.values())
    within = sum(1 for post in expected if post["id"] in replies and replies[post["id"]] <= result["load_end"])
    during = result["during"] or [0]
    third = max(1, len(during) // 3)
    growth = statistics.mean(during[-third:]) - statistics.mean(during[:third])
    sustained = (
        result["drained_after"] is not None and result["drained_after"] <= _model_seconds() + 5 and result["left"] == 0
    )
    resources = result["resources"] or [(0.0, 0, 0, 0.0, 0, 0.0)]
    cpu = "  ".join(f"{group} {1000 * seconds / count:.1f}" for group, seconds in sorted(result["cpu"].items()))
    scans = {table: n for table, n in result["scans"].items() if n}
    lines = [
        f"{layout}; model {_model_seconds():g} s{' streamed into cards' if _cards() else ''}; "
        f"offered {rate}/s for {result['elapsed']:.0f} s: "
        f"{count} messages ({sum(1 for p in posts if p['status'] != 200 and p['status'] != 202)} non-2xx), "
        f"{answered}/{len(expected)} answered at the stub ({within / max(result['elapsed'], 1):.1f}/s during the load; "
        "a message collected into another turn counts when that turn's reply arrives)",
        f"  backlog (queues + pending rows): max {max(during)}, last third minus first third {growth:+.0f}; "
        + (f"drained {result['drained_after']:.1f} s after the load" if result["drained_after"] is not None else "")
        + (f"NOT drained within {_drain_seconds():.0f} s ({result['left']} rows purged)" if result["left"] else "")
        + f" -> {'sustained' if sustained else 'NOT sustained'}",
        f"  turns in flight max {max(r[4] for r in resources)}; PostgreSQL connections to the hub's database: open "
        f"max {max(r[1] for r in resources)} (not idle max {max(r[2] for r in resources)}); RSS of the hub's "
        f"processes max {max(r[3] for r in resources):.0f} MiB, PSS max {max(r[5] for r in resources):.0f} MiB "
        "(web, workers, beat; RSS counts pages shared by fork in each process, PSS once)",
        "  overhead (webhook -> reply at the stub - model latency) p50/p99 s: "
        + "  ".join(
            f"{kind} {statistics.median(values):.2f}/{percentile(values, 0.99):.2f}"
            for kind, values in overheads.items()
            if values
        )
        + (f"  all {statistics.median(every):.2f}/{percentile(every, 0.99):.2f}" if every else ""),
        f"  webhook ack p50/p99 ms: {1000 * statistics.median(p['ack'] for p in posts):.0f}/"
        f"{1000 * percentile([p['ack'] for p in posts], 0.99):.0f};  CPU ms per message: {cpu}",
        "  statements per task (outcome: tasks, per task): "
        + "  ".join(
            f"{key[: -len(':tasks')]}: {n}, {result['queries'].get(key[: -len(':tasks')] + ':queries', 0) / n:.1f}"
            for key, n in sorted(result["queries"].items())
            if key.endswith(":tasks")
        ),
        "  sequential scans per message: "
        + ("  ".join(f"{table} {n / count:.2f}" for table, n in sorted(scans.items())) or "none"),
    ]
    return "\n".join(lines + ([result["profile"]] if result["profile"] else []))


@contextlib.contextmanager
def hub(suffix: str) -> Iterator[dict | None]:
    """The hub without its workers, for one bench run: the stubs' child process, a database of its own (migrated,
    the bench's bots and groups), gunicorn and beat. Yields a context dict, or None (after saying why) when there
    is no PostgreSQL or Redis to measure against; stops everything, drops the database and prints the processes'
    errors at the end. Workers the caller starts go into `context["processes"]` to be stopped with the rest."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    django.setup()
    import redis

    redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
    try:
        redis.Redis.from_url(redis_url, socket_timeout=2).ping()
        database_url, admin_url = _database(suffix)
    except Exception as error:  # no server to measure against: say so, as the other benches do
        print(f"skipped: needs PostgreSQL and Redis on 127.0.0.1 ({type(error).__name__}: {error})")
        yield None
        return
    tmp = Path(tempfile.mkdtemp(prefix=f"{suffix}_"))
    stubs = _spawn(
        [sys.executable, "-m", "bench.bench_pipeline", "--stubs", str(tmp)],
        os.environ,
        tmp,
        "stubs",
        AMUX_BENCH_MODEL_SECONDS=str(_model_seconds()),
    )
    context: dict = {"tmp": tmp, "stubs": stubs, "processes": [stubs], "redis_url": redis_url}
    context["database_url"] = database_url
    try:
        _wait_for(lambda: Path(tmp, "ports.json").exists(), "the stubs")
        ports = json.loads(Path(tmp, "ports.json").read_text())
        env = _env(database_url, redis_url, ports["feishu"])
        setup = subprocess.run(
            [sys.executable, "-c", PREPARE, ports["llm"], str(BOTS), str(_groups()), str(DISCUSS_EVERY)]
            + ["markdown_card" if _cards() else "text", str(_rest_threads())],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        setup_file = Path(tmp, "setup.json")
        setup_file.write_text(setup.splitlines()[-1])
        from django.conf import settings

        redis.Redis.from_url(redis_url).delete(*settings.CELERY_TASK_QUEUES, QUERY_COUNTS_KEY)
        port = 18000 + os.getpid() % 1000
        base = f"http://127.0.0.1:{port}"
        bin_dir = Path(sys.executable).parent
        web = _spawn(
            [str(bin_dir / "gunicorn"), "amuxweb.wsgi", "-w", "2", "-b", f"127.0.0.1:{port}", "--log-level", "warning"],
            env,
            tmp,
            "web",
        )
        beat = _spawn(
            [str(bin_dir / "celery"), "-A", "amuxweb", "beat", "--loglevel=WARNING", f"--schedule={tmp}/beat"],
            env,
            tmp,
            "beat",
        )
        context["processes"] += [web, beat]

        def ping() -> bool:
            try:
                with urllib.request.urlopen(f"{base}/feishu/ping/", timeout=5):
                    return True
            except OSError:
                return False

        _wait_for(ping, "gunicorn")
        context.update(env=env, setup_file=str(setup_file), base=base, web=web, beat=beat)
        yield context
    finally:
        if context.get("sampler") is not None:
            context["sampler"].stopping.set()
        for process in reversed(context["processes"]):
            _stop(process)
        for log in sorted(tmp.glob("*.log")):
            text = log.read_text(errors="replace")
            # The stubs' HTTP server logs a client that closed its kept-alive connection: not an error of the hub.
            tracebacks = text.count("Traceback") - text.count("ConnectionResetError: [Errno 104]")
            if tracebacks > 0:
                print(f"errors in {log.name}:\n{text[-2500:]}")
        import psycopg

        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database_url.rsplit("/", 1)[1]}" WITH (FORCE)')
        redis.Redis.from_url(redis_url).delete(QUERY_COUNTS_KEY)
        shutil.rmtree(tmp, ignore_errors=True)


def worker_groups(context: dict, started: list[subprocess.Popen], layout: str) -> dict[str, list[subprocess.Popen]]:
    """The processes measured, by role: the Procfile layout's short-task worker and turns workers apart."""
    workers = {"worker": started} if layout == "shared" else {"worker": started[:1], "turns": started[1:]}
    return {"web": [context["web"]], **workers, "beat": [context["beat"]]}


def _floors(env: dict) -> dict[str, float]:
    """`--floors`: bench_floors' pieces (ms of CPU each), measured now, in this run, on the same machine."""
    if "--floors" not in sys.argv:
        return {}
    out = Path(tempfile.mkdtemp(prefix="bench_floors_out_"), "floors.json")
    subprocess.run(
        [sys.executable, "-c", "from bench import bench_floors; bench_floors.run()"],
        cwd=ROOT,
        env={**os.environ, "AMUX_BENCH_FLOORS_OUT": str(out)},
        check=True,
        timeout=1800,
    )
    if not out.exists():  # bench_floors skipped itself (it said why): the phases print no ratio
        return {}
    return json.loads(out.read_text())


def _floor_line(result: dict, floors: dict[str, float], answered: int) -> str:
    """Hub CPU per message against the floor of what this phase actually did, per message: one request, its tasks
    (publish + run), its statements, a model call and a Feishu reply per answer (cards make more calls: a floor)."""
    if not floors:
        return ""
    count = len(result["posts"])
    tasks = sum(n for key, n in result["queries"].items() if key.endswith(":tasks")) / count
    statements = sum(n for key, n in result["queries"].items() if key.endswith(":queries")) / count
    rest = sum(1 for post in result["posts"] if post["kind"] == "rest") / count
    answers = answered / count
    floor = floors["request"] + tasks * (floors["publish"] + floors["task"]) + statements * floors["statement"]
    floor += (answers + rest) * floors["llm"] + answers * floors["reply"]
    hub = 1000 * sum(result["cpu"].values()) / count
    return (
        f"  hub CPU per message {hygiene.ratio(hub, floor)} ms (the floor of this phase's own work: "
        f"{tasks:.2f} tasks, {statements:.1f} statements, {answers + rest:.2f} model calls per message)"
    )


def run() -> None:
    rates = [int(value) for value in _flag("--rates", ",".join(map(str, RATES))).split(",")]
    seconds = int(_flag("--seconds", str(PHASE_SECONDS)))
    worker_sets = [int(value) for value in _flag("--workers", ",".join(map(str, WORKER_SETS))).split(",")]
    layout = _flag("--layout", "procfile")
    with hub("bench_pipeline") as context:
        if context is None:
            return
        floors = _floors(context["env"])
        for workers in worker_sets:
            started, ready = _workers_start(workers, layout, context["env"], context["tmp"])
            context["processes"] += started
            _wait_for(lambda ready=ready: all(path.exists() for path in ready), "the workers", seconds=180)
            if context.get("sampler") is not None:
                context["sampler"].stopping.set()
            sampler = Sampler(context["database_url"], context["redis_url"], worker_groups(context, started, layout))
            sampler.start()
            context.update(sampler=sampler, workers=started, profiled=False)
            # Not reported: every process imports its SDKs and opens its connections on its first messages.
            _phase(context, WARMUP_RATE, WARMUP_SECONDS, f"w{workers}warm")
            context["profiled"] = True
            for rate in rates:
                result = _phase(context, rate, seconds, f"w{workers}r{rate}")
                answers = _replies(context["tmp"], context["stubs"])
                load = os.getloadavg()
                answered_by = answered_at(result["turns"], answers["replies"])
                print(_report(result, answered_by, _layout_text(workers, layout)), flush=True)
                answered = sum(1 for post in result["posts"] if post["id"] in answers["replies"])
                if floors:
                    print(_floor_line(result, floors, answered), flush=True)
                hot = hot_topic.hot_line(
                    posts=result["posts"],
                    turns=result["turns"],
                    replies=answers["replies"],
                    reply_counts=answers["reply_counts"],
                    model_seconds=_model_seconds(),
                )
                if hot:
                    print(hot, flush=True)
                print(f"  load average now {load[0]:.1f}; model calls so far {answers['llm_calls']}", flush=True)
            for process in started:
                _stop(process)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stubs"]:
        _serve_stubs(sys.argv[2])
    elif sys.argv[1:2] == ["--load"]:
        _load(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7])
    else:
        run()
