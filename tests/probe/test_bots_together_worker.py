"""B3 across processes (REDIS_URL + PostgreSQL): three discuss bots' wakes fire in three prefork children of a real
worker at the same moment (their judges are held at the LLM stub until all three asked, then all say send), and
the chat still gets exactly one answer: the pick is a database claim, not a matter of timing."""

import threading
import time

import pytest

from agents.models import Bot, Turn
from feishu.discuss.sweep import discuss_wakes_sweep
from feishu.inbound.signing import event_request_build, message_event_payload
from feishu.models import AnswerCandidate, Arbitration, OutboundDelivery
from tests.agents.factories import LLMModelFactory, ProviderFactory
from tests.helpers import wait_for
from tests.probe.conftest import stub_base_url
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def prefork_worker(celery_worker_process):
    """The session's worker restarted with three prefork children (three processes); back to solo afterwards."""
    celery_worker_process.stop()
    celery_worker_process.pool_args = ["--pool=prefork", "--concurrency=3"]
    celery_worker_process.start()
    yield celery_worker_process
    celery_worker_process.stop()
    celery_worker_process.pool_args = ["--pool=solo"]


def test_b3_three_judges_in_three_processes_at_once_give_one_answer(
    prefork_worker, client, make_feishu_bot, make_judge, llm_stub
):
    # given: three discuss bots without Feishu secrets (their replies are recorded, F5), one judge, one primary
    provider = ProviderFactory(kind="openai_chat", base_url=stub_base_url("openai_chat", llm_stub), api_key="k")
    primary = LLMModelFactory(provider=provider, name="gpt-4o", supports_tool_calls=True)
    judge = make_judge(kind="anthropic")
    bots = [
        make_feishu_bot(
            slug=slug, feishu_app_secret="", primary_model=primary, group_reply_mode=Bot.GroupReplyMode.DISCUSS,
            discuss_probe_mode=Bot.ProbeMode.MODEL, discuss_probe_model=judge, probe_debounce_initial_ms=300,
        )
        for slug in ("coder", "planner", "reviewer")
    ]  # fmt: skip
    # and judges held until all three have asked, then answered together
    asked = threading.Semaphore(0)
    released = threading.Event()

    def judge_together(request) -> StubResponse:
        asked.release()
        released.wait(timeout=20)
        return StubResponse(body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "asked"})]))

    llm_stub.respond_with("anthropic", judge_together)
    llm_stub.respond_with("openai_chat", lambda request: StubResponse(body=openai_chat_body(text="One answer.")))
    # when: one un-addressed question reaches the three apps
    for bot in bots:
        payload = message_event_payload(
            verification_token=bot.feishu_verification_token, app_id=bot.feishu_app_id, message_id="om_once",
            chat_id="oc_workers", text="the deploy failed, what now?",
        )  # fmt: skip
        signed = event_request_build(payload=payload, encrypt_key=bot.feishu_encrypt_key)
        headers = {k: v for k, v in signed.django_headers().items() if k != "HTTP_CONTENT_TYPE"}
        response = client.post(
            f"/feishu/webhook/{bot.slug}/", data=signed.body, content_type="application/json", **headers
        )
        assert response.status_code == 200
    deadline = time.monotonic() + 45
    for _ in range(3):
        # The fire tasks were queued with their eta; the beat's sweep (every 5 s in production) is the catch-up for
        # a task the broker held back, so the test plays it too: it only enqueues, the worker's children judge.
        while not asked.acquire(timeout=3):
            assert time.monotonic() < deadline, prefork_worker.log_tail()
            discuss_wakes_sweep()
    released.set()  # the three judges answer at the same moment, in three processes
    # then: one pick, one turn, one reply; the two others arbitrated to it
    wait_for(lambda: OutboundDelivery.objects.exists(), worker=prefork_worker, what="the one reply", timeout=30)
    time.sleep(1.5)  # a second (wrong) answer would land by now
    assert Turn.objects.count() == 1
    assert OutboundDelivery.objects.count() == 1
    arbitration = Arbitration.objects.get()
    assert arbitration.winner_turn_id == Turn.objects.get().pk
    outcomes = sorted(AnswerCandidate.objects.values_list("outcome", flat=True))
    assert outcomes == ["arbitrated", "arbitrated", "picked"]
    assert len(llm_stub.requests_for("anthropic")) == 3
