"""Issue 30, finding 10: a graceful stop (SIGTERM to the worker's process group, as honcho sends it) hands a
running turn back at once instead of leaving it `running` for the sweeper (about six minutes) to re-run.

A real prefork worker started with the Procfile's flags (REDIS_URL and PostgreSQL), a model stub that takes
longer to answer than honcho waits before its SIGKILL (5 s), and a REST turn in flight when the SIGTERM comes.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Message, Provider, Turn
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory
from tests.helpers import wait_for
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

REPOSITORY = Path(__file__).resolve().parents[2]
HONCHO_KILL_WAIT_SECONDS = 5  # honcho.manager.KILL_WAIT: SIGKILL follows the SIGTERM this much later
SLOW_MODEL_SECONDS = 8  # longer than HONCHO_KILL_WAIT_SECONDS: the call is in flight all through the stop


def procfile_worker_args(name: str) -> list[str]:
    """The flags of the Procfile's `name:` celery worker (pool, concurrency, gossip, mingle), without the log level,
    the node name (the fixture names its own) and the queues (the test's worker must run the turn, whatever it is)."""
    line = re.search(rf"^{name}:\s*(.+)$", (REPOSITORY / "Procfile").read_text(), re.MULTILINE).group(1)
    args = line.split(" worker ", 1)[1].split()
    kept = [arg for arg in args if not arg.startswith(("--loglevel", "--hostname"))]
    return [arg for index, arg in enumerate(kept) if arg != "-Q" and (index == 0 or kept[index - 1] != "-Q")]


def procfile_worker(celery_worker_process, name: str):
    """The session's worker restarted with the Procfile's `name:` flags; back to its own afterwards.

    Its broker visibility timeout is above the slow model call, as production's (600 s) is above the task time
    limit: the session's 3 s would have the broker redeliver the turn's message while its model call is running.
    """
    celery_worker_process.stop()
    celery_worker_process.pool_args = procfile_worker_args(name)
    saved_visibility = celery_worker_process.env["CELERY_VISIBILITY_TIMEOUT"]
    celery_worker_process.env["CELERY_VISIBILITY_TIMEOUT"] = str(4 * SLOW_MODEL_SECONDS)
    celery_worker_process.start()
    yield celery_worker_process
    celery_worker_process.stop()
    celery_worker_process.pool_args = ["--pool=solo"]
    celery_worker_process.env["CELERY_VISIBILITY_TIMEOUT"] = saved_visibility


@pytest.fixture(params=["worker", "turns"])
def stopping_worker(request, celery_worker_process):
    """Each of the Procfile's workers: `worker` (prefork, where a delivery retry runs a turn) and `turns` (the
    thread pool every turn runs in since issue 28)."""
    yield from procfile_worker(celery_worker_process, request.param)


def rest_turn(llm_stub) -> tuple[int, int]:
    owner = UserFactory(username="owner")
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=60
    )
    bot = BotFactory(owner=owner, primary_model=LLMModelFactory(provider=provider, name="gpt-4o"))
    thread = ThreadFactory(bot=bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=owner).key}")
    response = client.post(f"/api/v1/threads/{thread.pk}/messages/", {"content": "hello"}, format="json")
    assert response.status_code == 202
    return response.json()["turn_id"], thread.pk


def test_i30_10_sigterm_mid_turn_hands_the_turn_back_at_once_and_the_reply_goes_out_once(stopping_worker, llm_stub):
    # given: a turn whose model call is in flight and slower than honcho's grace
    assert "--pool=solo" not in stopping_worker.pool_args and "-Q" not in stopping_worker.pool_args
    llm_stub.enqueue(
        "openai_chat", StubResponse(body=openai_chat_body(text="too late"), delay_seconds=SLOW_MODEL_SECONDS)
    )
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="Answered after the restart.")))
    turn_id, thread_id = rest_turn(llm_stub)
    wait_for(lambda: llm_stub.requests_for("openai_chat"), timeout=60, worker=stopping_worker, what="the model call")
    called_at = time.monotonic()
    assert Turn.objects.get(pk=turn_id).status == Turn.Status.RUNNING

    # when: SIGTERM to the whole process group, and SIGKILL after its grace, as honcho stops it
    stopped_at = time.monotonic()
    os.killpg(stopping_worker.process.pid, signal.SIGTERM)
    try:
        stopping_worker.process.wait(timeout=HONCHO_KILL_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(stopping_worker.process.pid, signal.SIGKILL)
        stopping_worker.process.wait(timeout=30)
    stop_seconds = time.monotonic() - stopped_at

    # then: a prefork worker stopped on its own within honcho's grace (a thread pool's warm shutdown waits for its
    # threads, so the SIGKILL ends it: its turns were handed back before), the turn is queued again with its claim
    # released and its attempt not counted, and nothing was replied
    if "--pool=threads" not in stopping_worker.pool_args:
        assert stop_seconds < HONCHO_KILL_WAIT_SECONDS, stopping_worker.log_tail()
    turn = Turn.objects.get(pk=turn_id)
    assert (turn.status, turn.claimed_at, turn.attempts, turn.reply_message_id) == ("queued", None, 0, None)
    assert turn.enqueued_at is not None
    assert "turn handed back: its worker is stopping" in stopping_worker.log_tail()
    assert not Message.objects.filter(thread_id=thread_id, kind=Message.Kind.AGENT_REPLY).exists()

    # when: the next worker starts
    restarted_at = time.monotonic()
    stopping_worker.start()

    # then: it runs the handed-back turn at once (not the sweeper's ~6 minutes later), and replies once
    wait_for(
        lambda: Turn.objects.get(pk=turn_id).status == Turn.Status.DELIVERED,
        timeout=60,
        worker=stopping_worker,
        what="the handed-back turn",
    )
    assert time.monotonic() - restarted_at < 60
    replies = list(
        Message.objects.filter(thread_id=thread_id, kind=Message.Kind.AGENT_REPLY).values_list("content", flat=True)
    )
    assert replies == ["Answered after the restart."]
    assert Turn.objects.get(pk=turn_id).attempts == 1
    # the interrupted call and the re-run's: a call the provider was still answering cannot be taken back
    assert len(llm_stub.requests_for("openai_chat")) == 2
    # clean-up: the stub answers the abandoned call when its delay ends (its request thread then sees the closed
    # socket and ends); wait for that, so no thread outlives this module (tests/isolation.py)
    time.sleep(max(0.0, called_at + SLOW_MODEL_SECONDS + 1 - time.monotonic()))
