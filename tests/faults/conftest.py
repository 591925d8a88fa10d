"""The fault suite's world: its own Redis and PostgreSQL, the hub's processes on them, the stubs, a Feishu sender.

One session starts (and tears down after):
- a `redis-server` and a PostgreSQL cluster of the suite's own (tests/faults/servers.py), on free ports;
- the Feishu stub and the LLM stub (tests/stubs/) in this process, on 127.0.0.1;
- the hub: `manage.py migrate`, then gunicorn serving the webhook, a Celery worker consuming every queue of
  CELERY_TASK_ROUTES, and beat (DatabaseScheduler, both sweepers), all with tests.faults.settings.
Each test makes a bot of its own (its replies are told apart by app id) and drives it through `FeishuSender`,
which posts signed, encrypted events as Feishu does and resends every one not answered 200, as Feishu does.

The suite is opt-in, like the browser tests: `pytest -m faults` (.ci/run does); any other selection skips it.
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psycopg
import pytest
import requests
from django.conf import settings

from feishu.inbound.signing import event_request_build, mention_entry, message_event_payload
from tests.faults.servers import (
    REPOSITORY,
    HubProcess,
    PostgresCluster,
    RedisServer,
    free_port,
    temporary_directory,
    wait_until,
)
from tests.stubs.feishu_server import FeishuStub, FeishuStubServer
from tests.stubs.llm_servers import LLMStubServer, StubResponse, openai_chat_body

# The hub's short timeouts (tests/faults/settings.py reads them from the environment the hub gets): a killed
# worker's task comes back after VISIBILITY_TIMEOUT_SECONDS, beat runs both sweepers every SWEEP_SECONDS, and an
# event still pending PENDING_AFTER_SECONDS after it was stored is re-enqueued by the sweeper.
# (The hard time limit is set just below the visibility timeout, as it must be; the soft one a few seconds below
# that. Much shorter and a first turn's lazy import of an SDK, seconds on a loaded machine, runs into it.)
VISIBILITY_TIMEOUT_SECONDS = 20
SWEEP_SECONDS = 5
PENDING_AFTER_SECONDS = 5
# What a backlog costs on this 2-core machine: the bound of each fault allows this much work per event on top of
# the visibility timeout and one sweep (an event and its turn took ~1-1.3 s of worker time with the machine busy).
DRAIN_SECONDS_PER_EVENT = 2.0  # a streamed reply is ~9 Feishu calls, each through the send budget
# Feishu resends an event it got no 200 for (15 s, 5 min, ... in production); the sender here waits this long.
RESEND_AFTER_SECONDS = 1.0
RESEND_MAX_ATTEMPTS = 60
SENDER_THREADS = 8
DATABASE_NAME = "amuxweb_faults"


def pytest_collection_modifyitems(config, items):
    if "faults" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the fault suite runs on its own servers: select it with -m faults")
    for item in items:
        if item.get_closest_marker("faults"):
            item.add_marker(skip)


class SlowModel:
    """An LLM stub responder that answers after `seconds` while `slow`, counting the calls waiting right now."""

    def __init__(self, *, seconds: float) -> None:
        self.seconds, self.slow, self.waiting = seconds, True, 0
        self.lock = threading.Lock()

    def __call__(self, request) -> StubResponse:
        if self.slow:
            with self.lock:
                self.waiting += 1
            time.sleep(self.seconds)
            with self.lock:
                self.waiting -= 1
        return StubResponse(body=openai_chat_body(text="answer"))


class SlowFeishuStub(FeishuStub):
    """The Feishu stub, able to hold its answer to a send after it has made the message (a reply in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.send_answer_delay_seconds = 0.0
        self.sends_held = 0  # sends made whose answer is being held right now

    def handle(self, request):
        answer = super().handle(request)
        if request.route in ("reply", "create") and self.send_answer_delay_seconds:
            with self.lock:
                self.sends_held += 1
            time.sleep(self.send_answer_delay_seconds)
            with self.lock:
                self.sends_held -= 1
        return answer

    def replies_by_parent(self, *, app_id: str) -> Counter:
        with self.lock:
            return Counter(sent["parent_id"] for sent in self.sent if sent["app_id"] == app_id)


def worker_queues() -> str:
    """Every queue a task may be routed to (CELERY_TASK_ROUTES), and the default one."""
    queues = {getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery")}
    for route in (getattr(settings, "CELERY_TASK_ROUTES", None) or {}).values():
        if isinstance(route, dict) and route.get("queue"):
            queues.add(route["queue"])
    return ",".join(sorted(queues))


class Hub:
    """The hub's processes and the servers under them; the faults are methods here."""

    def __init__(self, *, feishu: SlowFeishuStub, feishu_url: str, llm: LLMStubServer) -> None:
        self.feishu, self.llm = feishu, llm
        self.logs = temporary_directory("amuxweb-faults-logs-")
        self.redis = RedisServer(temporary_directory("amuxweb-faults-redis-"))
        self.postgres = PostgresCluster(temporary_directory("amuxweb-faults-pg-"))
        self.database_url = self.postgres.database_url(DATABASE_NAME)
        self.web_port = free_port()
        self.env = {
            **{key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "PYTEST_"))},
            "DJANGO_SETTINGS_MODULE": "tests.faults.settings",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.redis.url,
            "FEISHU_DOMAIN": feishu_url,
            "FAULTS_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY_TIMEOUT_SECONDS),
            "FAULTS_SWEEP_SECONDS": str(SWEEP_SECONDS),
            "FAULTS_PENDING_AFTER_SECONDS": str(PENDING_AFTER_SECONDS),
        }
        python = sys.executable
        self.web = HubProcess(
            name="web",
            command=[python, "-m", "gunicorn", "amuxweb.wsgi:application", "--bind", f"127.0.0.1:{self.web_port}"]
            + ["--workers", "2", "--threads", "4", "--timeout", "30"],
            env=self.env,
            directory=self.logs,
            ready="Booting worker",
        )
        # Two workers, as production runs more than one: a fault kills one, the other goes on, and the killed one's
        # unacknowledged tasks come back after the visibility timeout to whichever worker takes them.
        self.workers = [
            HubProcess(
                name=f"worker-{number}",
                command=[python, "-m", "celery", "-A", "amuxweb", "worker", "--loglevel=INFO", "--concurrency=1"]
                + ["--without-gossip", "--without-mingle", "-Q", worker_queues()]
                + [f"--hostname=faults-{number}-{os.getpid()}@%h"],
                env=self.env,
                directory=self.logs,
                ready=" ready.",
            )
            for number in (1, 2)
        ]
        self.beat = HubProcess(
            name="beat",
            command=[python, "-m", "celery", "-A", "amuxweb", "beat", "--loglevel=INFO", "--max-interval=1"]
            + [f"--schedule={self.logs / 'beat-schedule'}"],
            env=self.env,
            directory=self.logs,
            ready="beat: Starting",
        )

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.redis.start()
        self.postgres.init()
        self.postgres.start()
        self.postgres.create_database(DATABASE_NAME)
        for process in (self.web, *self.workers):
            process.launch()  # they import while migrate runs; beat's DatabaseScheduler needs the tables first
        self.manage("migrate", "--noinput")
        self.beat.launch()
        for process in (self.web, *self.workers, self.beat):
            process.wait_ready()
        wait_until(self._web_answers, what="gunicorn answering", log=self.web.tail)

    def stop(self) -> None:
        for process in (self.beat, *self.workers, self.web):
            process.stop()
        self.redis.stop()
        self.postgres.stop()

    def remove_files(self) -> None:
        """The servers' data; the hub's logs stay (their directory is printed) for a failure to be read."""
        for directory in (self.redis.directory, self.postgres.directory):
            shutil.rmtree(directory, ignore_errors=True)

    def _web_answers(self) -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{self.web_port}/feishu/ping/", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def manage(self, *args: str) -> str:
        return self.run_python("manage.py", *args)

    def run_python(self, *args: str) -> str:
        """A one-off hub command (migrate, the seed) on the suite's servers; its stdout."""
        done = subprocess.run([sys.executable, *args], env=self.env, cwd=REPOSITORY, capture_output=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout.decode()}\n{done.stderr.decode()}")
        return done.stdout.decode()

    def tails(self) -> str:
        return "\n".join(f"--- {p.name} log:\n{p.tail(25)}" for p in (self.web, *self.workers, self.beat))

    def worker_kill(self, *, number: int) -> threading.Thread:
        """SIGKILL one worker (its whole process group), and start it again in the background (the thread)."""
        worker = self.workers[number - 1]
        worker.kill()
        restart = threading.Thread(target=worker.start, daemon=True)
        restart.start()
        return restart

    # --- reading the hub's database (the test's own connection, not the hub's) -------------------------------
    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        url = self.database_url.replace("postgres://", "postgresql://")
        with psycopg.connect(url, connect_timeout=5) as connection:
            return connection.execute(sql, params).fetchall()

    def turn_statuses(self, *, bot_id: int) -> dict[str, int]:
        rows = self.query("SELECT status, count(*) FROM agents_turn WHERE bot_id = %s GROUP BY status", (bot_id,))
        return dict(rows)

    def event_statuses(self, *, bot_id: int) -> dict[str, int]:
        rows = self.query(
            "SELECT status, count(*) FROM feishu_inboundevent WHERE bot_id = %s GROUP BY status", (bot_id,)
        )
        return dict(rows)


@dataclass(frozen=True)
class FaultBot:
    bot_id: int
    slug: str
    app_id: str
    app_secret: str
    encrypt_key: str
    verification_token: str

    @property
    def open_id(self) -> str:
        return f"ou_bot_{self.app_id}"


@dataclass
class Push:
    """One event as the sender saw it: the status of each of its pushes (the last 200 ends them)."""

    message_id: str
    statuses: list[int] = field(default_factory=list)

    @property
    def acknowledged(self) -> bool:
        return bool(self.statuses) and self.statuses[-1] == 200

    @property
    def acknowledged_first_time(self) -> bool:
        return self.statuses[:1] == [200]


class FeishuSender:
    """Feishu's side of the webhook: signed, encrypted pushes, each resent until it is answered 200."""

    def __init__(self, *, hub: Hub, bot: FaultBot) -> None:
        self.hub, self.bot = hub, bot
        self.url = f"http://127.0.0.1:{hub.web_port}/feishu/webhook/{bot.slug}/"
        self._local = threading.local()

    def _session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        return self._local.session

    def payload(self, *, index: int) -> dict:
        """A group message @-ing the bot; twenty chats, so Feishu's 5 sends/s per chat never decide the pace."""
        return message_event_payload(
            verification_token=self.bot.verification_token,
            app_id=self.bot.app_id,
            message_id=f"om_{self.bot.slug}_{index:04d}",
            chat_id=f"oc_{self.bot.slug}_{index % 20:02d}",
            text=f"@_user_1 question {index}",
            sender_open_id=f"ou_user_{index % 7}",
            mentions=[mention_entry(index=1, open_id=self.bot.open_id, name=self.bot.slug.title())],
            event_id=f"evt_{self.bot.slug}_{index:04d}",
        )

    def _post(self, payload: dict) -> int:
        signed = event_request_build(payload=payload, encrypt_key=self.bot.encrypt_key)  # a fresh stamp each push
        try:
            return self._session().post(self.url, data=signed.body, headers=signed.headers, timeout=10).status_code
        except requests.RequestException:
            return 0  # no answer at all: Feishu resends as for any non-200

    def _deliver(self, payload: dict, push: Push) -> None:
        for _ in range(RESEND_MAX_ATTEMPTS):
            push.statuses.append(self._post(payload))
            if push.acknowledged:
                return
            time.sleep(RESEND_AFTER_SECONDS)

    def topic_message(self, *, number: int, text: str) -> Push:
        """One @-message in the bot's topic (one conversation: a topic of one chat), delivered as `burst` does."""
        slug = self.bot.slug
        payload = message_event_payload(
            verification_token=self.bot.verification_token,
            app_id=self.bot.app_id,
            message_id=f"om_{slug}_topic_{number}",
            chat_id=f"oc_{slug}_topic",
            text=f"@_user_1 {text}",
            sender_open_id="ou_user_topic",
            root_id=f"om_{slug}_topic_root",
            thread_id=f"omt_{slug}_topic",
            mentions=[mention_entry(index=1, open_id=self.bot.open_id, name=slug.title())],
            event_id=f"evt_{slug}_topic_{number}",
        )
        push = Push(message_id=payload["event"]["message"]["message_id"])
        self._deliver(payload, push)
        return push

    def burst(self, *, count: int, per_second: float) -> list[Push]:
        """`count` events at `per_second`, from SENDER_THREADS threads; returns when every one was answered 200
        (or RESEND_MAX_ATTEMPTS pushes failed)."""
        started = time.monotonic()
        pushes = [Push(message_id=self.payload(index=i)["event"]["message"]["message_id"]) for i in range(count)]

        def send(index: int) -> None:
            time.sleep(max(0.0, started + index / per_second - time.monotonic()))
            self._deliver(self.payload(index=index), pushes[index])

        with ThreadPoolExecutor(max_workers=SENDER_THREADS) as pool:
            list(pool.map(send, range(count)))
        return pushes


@dataclass
class FaultFigures:
    """What one fault test measured; `line()` is the one line it prints."""

    name: str
    sent: int
    acked_first_time: int
    resent: int
    never_acked: int
    answered: int
    lost: int
    duplicated: int
    answered_within_seconds: float
    bound_seconds: float
    turns: dict[str, int]
    extra: dict[str, object] = field(default_factory=dict)

    def line(self) -> str:
        extra = " ".join(f"{key}={value}" for key, value in self.extra.items())
        turns = ",".join(f"{status}:{count}" for status, count in sorted(self.turns.items()))
        return (
            f"FAULTS {self.name}: sent={self.sent} acked={self.acked_first_time} resent={self.resent} "
            f"never_acked={self.never_acked} answered={self.answered} lost={self.lost} duplicated={self.duplicated} "
            f"answered_within={self.answered_within_seconds:.1f}s bound={self.bound_seconds:.0f}s turns={turns} {extra}"
        ).rstrip()


def answers_awaited(
    *, hub: Hub, bot: FaultBot, pushes: list[Push], since: float, bound_seconds: float, name: str, **extra
) -> FaultFigures:
    """Wait (at most `bound_seconds` after `since`) for a reply to every acknowledged event, then as long again as a
    redelivery would take to double one; count the replies each message got at the Feishu stub."""
    expected = {push.message_id for push in pushes if push.acknowledged}

    def replies() -> Counter:
        return hub.feishu.replies_by_parent(app_id=bot.app_id)

    deadline = since + bound_seconds
    while time.monotonic() < deadline and not expected <= set(replies()):
        time.sleep(0.25)
    answered_at = time.monotonic()
    time.sleep(VISIBILITY_TIMEOUT_SECONDS + SWEEP_SECONDS)  # a doubled reply would show by now
    counts = replies()
    return FaultFigures(
        name=name,
        sent=len(pushes),
        acked_first_time=sum(push.acknowledged_first_time for push in pushes),
        resent=sum(not push.acknowledged_first_time for push in pushes),
        never_acked=sum(not push.acknowledged for push in pushes),
        answered=sum(1 for message_id in expected if counts[message_id] >= 1),
        lost=sum(1 for message_id in expected if counts[message_id] == 0),
        duplicated=sum(counts[message_id] - 1 for message_id in expected if counts[message_id] > 1),
        answered_within_seconds=answered_at - since,
        bound_seconds=bound_seconds,
        turns=hub.turn_statuses(bot_id=bot.bot_id),
        extra=extra,
    )


@pytest.fixture(scope="session")
def fault_hub():
    feishu_server = FeishuStubServer(SlowFeishuStub()).start()
    llm = LLMStubServer().start()
    hub = Hub(feishu=feishu_server.stub, feishu_url=feishu_server.url, llm=llm)
    try:
        hub.start()
        yield hub
    finally:
        hub.stop()
        feishu_server.stop()
        llm.stop()
        hub.remove_files()
        print(f"fault suite logs: {hub.logs}")


def fault_bot_seed(hub: Hub, **settings: str) -> FaultBot:
    """A bot of the calling test's own in the hub's database (tests.faults.seed; `settings`: its other fields)."""
    suffix = secrets.token_hex(3)
    fields = {
        "slug": f"faults-{suffix}",
        "llm_base_url": hub.llm.url("/v1"),
        "app_id": f"cli_faults_{suffix}",
        "app_secret": f"app-secret-{suffix}",
        "encrypt_key": f"encrypt-key-{suffix}",
        "token": f"verification-token-{suffix}",
        **settings,
    }
    created = json.loads(hub.run_python("-m", "tests.faults.seed", json.dumps(fields)).strip().splitlines()[-1])
    return FaultBot(
        bot_id=created["bot_id"],
        slug=fields["slug"],
        app_id=fields["app_id"],
        app_secret=fields["app_secret"],
        encrypt_key=fields["encrypt_key"],
        verification_token=fields["token"],
    )


def fault_stubs_at_rest(hub: Hub) -> None:
    hub.feishu.send_answer_delay_seconds = 0.0
    hub.llm.respond_with("openai_chat", None)


@pytest.fixture
def fault_bot(fault_hub) -> FaultBot:
    """A bot of this test's own in the hub's database; the stubs' fault controls back at rest."""
    fault_stubs_at_rest(fault_hub)
    return fault_bot_seed(fault_hub)


@pytest.fixture
def feishu_sender(fault_hub, fault_bot) -> FeishuSender:
    return FeishuSender(hub=fault_hub, bot=fault_bot)
