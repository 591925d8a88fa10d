"""One turn at a time per conversation on the embedded default (ARCHITECTURE §11.1 O1-O4, issue 22): a SQLite file
database and the embedded broker in its own SQLite file (amuxweb/embedded_broker.py), as `make run` has them.

The pytest database (in memory) cannot be shared with other processes, so the module starts a hub of its own on a
temporary SQLite file, as tests/faults does on its servers: `manage.py migrate`, `embedded_broker_prepare` (as
`make run`: the broker's tables and queues exist before the processes that share it start) and the seed in
subprocesses, then gunicorn serving the API and two Celery workers, all with `amuxweb.settings.local`. Three quick messages on a REST
thread with a slow first model answer, per queue mode (tests/conversation_workers.py; the steering bot uses the MCP
stub's tool over HTTP); and two threads side by side.

It runs in the SQLite run (`make test`); the PostgreSQL + Redis run proves the same on its own servers
(tests/feishu/test_conversation_workers.py), so there this module is skipped rather than paid for twice.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests

from agents.models import Bot
from tests.conversation_workers import (
    WorkerLogs,
    assert_rest_conversation,
    assert_rest_conversations_run_side_by_side,
    model_for,
    rest_three_quickly,
)
from tests.faults.servers import REPOSITORY, HubProcess, free_port, wait_until
from tests.stubs.llm_servers import LLMStubServer
from tests.stubs.mcp_server import http_server_running

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("REDIS_URL")), reason="the embedded default's run (no REDIS_URL) covers it; this run has Redis"
)


class EmbeddedHub:
    """web + two workers on a SQLite file and the embedded broker's file, in `directory`."""

    def __init__(self, directory: Path, *, llm: LLMStubServer, mcp_url: str) -> None:
        self.directory, self.llm, self.mcp_url = directory, llm, mcp_url
        self.port = free_port()
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "PYTEST_")) and key not in ("DATABASE_URL", "REDIS_URL")
        }
        self.env.update(
            DJANGO_SETTINGS_MODULE="amuxweb.settings.local",
            DATABASE_URL=f"sqlite:///{directory / 'amuxweb.sqlite3'}",  # the broker's file goes beside it
            PROMETHEUS_MULTIPROC_DIR=str(directory / "prometheus"),
        )
        python = sys.executable
        self.web = HubProcess(
            name="web",
            command=[python, "-m", "gunicorn", "amuxweb.wsgi:application", "--bind", f"127.0.0.1:{self.port}"]
            + ["--workers", "1", "--threads", "4"],
            env=self.env,
            directory=directory,
            ready="Booting worker",
        )
        # One task at a time each (solo), so the turns of one conversation are spread over both processes.
        self.workers = [
            HubProcess(
                name=f"worker-{number}",
                command=[python, "-m", "celery", "-A", "amuxweb", "worker", "--pool=solo", "--loglevel=INFO"]
                + ["--without-gossip", "--without-mingle", "--without-heartbeat"]
                + [f"--hostname=embedded-{number}-{os.getpid()}@%h"],
                env=self.env,
                directory=directory,
                ready=" ready.",
            )
            for number in (1, 2)
        ]
        self.token, self.bots = "", {}
        self.session = requests.Session()

    def start(self) -> None:
        (self.directory / "prometheus").mkdir()
        self.run_python("manage.py", "migrate", "--noinput")
        self.run_python("manage.py", "embedded_broker_prepare")
        fields = {"llm_base_url": self.llm.url("/v1"), "mcp_url": self.mcp_url}
        seeded = json.loads(
            self.run_python("-m", "tests.agents.conversation_seed", json.dumps(fields)).splitlines()[-1]
        )
        self.token, self.bots = seeded["token"], seeded["bots"]
        self.session.headers["Authorization"] = f"Token {self.token}"
        for process in (self.web, *self.workers):
            process.launch()
        for process in (self.web, *self.workers):
            process.wait_ready()
        wait_until(lambda: self.rest("get", "/api/v1/threads/")[0] == 200, what="the API answering", log=self.web.tail)

    def stop(self) -> None:
        processes = (*self.workers, self.web)
        for process in processes:  # all asked at once: a worker's warm shutdown takes seconds
            if process.is_running():
                os.killpg(process.process.pid, signal.SIGTERM)
        for process in processes:
            process.stop()
        self.session.close()

    def run_python(self, *args: str) -> str:
        done = subprocess.run([sys.executable, *args], env=self.env, cwd=REPOSITORY, capture_output=True, timeout=300)
        assert done.returncode == 0, f"{args} failed:\n{done.stdout.decode()}\n{done.stderr.decode()}"
        return done.stdout.decode()

    def rest(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        try:
            response = self.session.request(method, f"http://127.0.0.1:{self.port}{path}", json=body, timeout=10)
        except requests.ConnectionError:
            return 0, None
        return response.status_code, response.json()

    def thread_create(self, *, queue_mode: str) -> int:
        status, body = self.rest("post", "/api/v1/threads/", {"bot": self.bots[queue_mode], "runtime_mode": "chat"})
        assert status == 201, body
        return body["id"]


@pytest.fixture(scope="module")
def embedded_hub():
    directory = Path(tempfile.mkdtemp(prefix="amuxweb-embedded-"))
    llm = LLMStubServer().start()
    try:
        with http_server_running() as mcp_url:
            hub = EmbeddedHub(directory, llm=llm, mcp_url=mcp_url)
            try:
                hub.start()
                yield hub
            finally:
                hub.stop()
    finally:
        llm.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def hub(embedded_hub) -> EmbeddedHub:
    embedded_hub.llm.reset()
    return embedded_hub


@pytest.mark.parametrize("queue_mode", [Bot.QueueMode.COLLECT, Bot.QueueMode.FOLLOWUP, Bot.QueueMode.STEER])
def test_three_quick_messages_on_the_embedded_default_with_two_workers(hub, queue_mode):
    # given
    thread_id = hub.thread_create(queue_mode=queue_mode)
    logs = WorkerLogs(hub.workers)
    # when
    turn_ids = rest_three_quickly(
        hub.rest, thread_id=thread_id, model=model_for(hub.llm, queue_mode=queue_mode), logs=logs
    )
    # then
    assert_rest_conversation(
        hub.rest, hub.llm, thread_id=thread_id, turn_ids=turn_ids, queue_mode=queue_mode, logs=logs
    )


def test_two_conversations_still_run_side_by_side_on_the_embedded_default(hub):
    thread_ids = [hub.thread_create(queue_mode=Bot.QueueMode.COLLECT) for _ in range(2)]
    assert_rest_conversations_run_side_by_side(hub.rest, hub.llm, thread_ids=thread_ids, logs=WorkerLogs(hub.workers))
