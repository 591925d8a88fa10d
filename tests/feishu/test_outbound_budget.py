"""R4: one send budget per chat (5/s, shared by every bot of the hub) and per app (50/s), in Redis (one Lua
script for every worker and node) and in the database on the embedded default; final sends wait, never drop;
intermediate updates are refused at once so the caller merges them."""

import shutil
import socket
import subprocess
import threading
import time

import pytest
import redis
from django.db import connection

from feishu.models import SendBudgetBucket
from feishu.outbound import budget
from feishu.outbound import sends as feishu_sends
from feishu.outbound.budget import SendBudget, bucket_take, send_budget_acquire, send_budget_try

BOTS = 3
SENDS_PER_BOT = 10
CHAT = "oc_shared_group"


@pytest.fixture
def private_redis():
    """A redis-server of this test's own on a free port: the machine's shared Redis is never written."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is needed for the Redis budget test (apt-get install redis-server)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.05)
    yield url
    process.terminate()
    process.wait(timeout=10)


def test_r4_bucket_take_refills_by_rate_and_takes_from_both_buckets_or_neither():
    # given: the chat's bucket is empty, the app's full
    # when
    wait, levels = bucket_take(tokens=[0.0, 1.0], refilled_at=[10.0, 10.0], rates=[5.0, 50.0], now=10.1)
    # then: wait for the chat's token (0.5 of one at 5/s = 0.1 s), nothing taken from the app
    assert wait == pytest.approx(0.1)
    assert levels == pytest.approx([0.5, 1.0])
    # and once refilled, both are taken
    assert bucket_take(tokens=[0.0, 1.0], refilled_at=[10.0, 10.0], rates=[5.0, 50.0], now=10.2) == (
        0.0,
        pytest.approx([0.0, 0.0]),
    )


def _three_bots_send_into_one_chat(bots, stub) -> float:
    errors: list[BaseException] = []

    def sender(bot) -> None:
        try:
            for index in range(SENDS_PER_BOT):
                feishu_sends.message_create(
                    bot=bot,
                    chat_id=CHAT,
                    text=f"{bot.slug} {index}",
                    uuid=f"{bot.slug}-{index}",
                    budget=SendBudget(chat_id=CHAT),
                )
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=sender, args=(bot,)) for bot in bots]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    return time.monotonic() - started


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("backend", ["database", "redis"])
def test_r4_three_bots_ten_sends_into_one_chat_never_exceed_5_per_second_at_feishu(
    request, settings, feishu_stub, make_feishu_bot, backend
):
    # given: three bots (three apps) sharing one group, each in its own worker thread
    settings.REDIS_URL = request.getfixturevalue("private_redis") if backend == "redis" else ""
    bots = [make_feishu_bot() for _ in range(BOTS)]
    # when
    elapsed = _three_bots_send_into_one_chat(bots, feishu_stub)
    # then: all 30 delivered, none refused by Feishu, never more than 5 in any second, in bounded time
    creates = feishu_stub.requests_to("create")
    assert len(feishu_stub.accepted("create")) == BOTS * SENDS_PER_BOT
    assert [r for r in creates if r.status != 200] == []
    assert feishu_stub.max_per_second(creates) <= 5
    # 30 sends at 4.5/s cannot take less than ~6.4 s; a busy machine only makes it longer (no upper bound here)
    assert elapsed >= 5.0
    stored = SendBudgetBucket.objects.filter(key=f"chat:{CHAT}").exists()
    assert stored is (backend == "database")


@pytest.mark.django_db
@pytest.mark.parametrize("backend", ["database", "redis"])
def test_r4_try_never_waits_and_refuses_while_the_chat_is_spent(request, settings, monkeypatch, backend):
    # given
    settings.REDIS_URL = request.getfixturevalue("private_redis") if backend == "redis" else ""
    assert send_budget_try(chat_id="oc_busy", app_id="cli_a") is True
    slept: list[float] = []
    monkeypatch.setattr(budget.time, "sleep", slept.append)
    # when
    refused = send_budget_try(chat_id="oc_busy", app_id="cli_b")
    # then: refused at once (it never sleeps for a token); the chat is shared across apps; another chat is free
    assert (refused, slept) == (False, [])
    assert send_budget_try(chat_id="oc_other", app_id="cli_c") is True


@pytest.mark.django_db
def test_r4_acquire_waits_for_the_next_token_and_never_drops_the_send(settings, monkeypatch):
    # given
    settings.REDIS_URL = ""
    clock = [1_000.0]
    monkeypatch.setattr(budget.time, "time", lambda: clock[0])
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    send_budget_acquire(chat_id="oc_wait", app_id="cli_a", sleep=sleep)
    # when: a second send at the same instant
    send_budget_acquire(chat_id="oc_wait", app_id="cli_a", sleep=sleep)
    # then: it waited exactly one token's refill, 1 / (5 * 0.9) s, and was taken (not dropped)
    assert sum(slept) == pytest.approx(1 / 4.5)
    assert SendBudgetBucket.objects.get(key="chat:oc_wait").tokens == pytest.approx(0.0)


@pytest.mark.django_db
def test_r4_a_database_token_is_stamped_when_spent_not_when_a_stalled_read_began(settings, monkeypatch):
    """Under load a worker's read of the bucket rows can stall (its first query opens a connection, the thread
    is descheduled): the token it then spends must be dated after that read, or the next worker refills from
    the earlier stamp and sends right behind it (the sixth inside a second seen at the stub)."""
    # given: a clock the test moves, and a first read that stalls half a second (2.25 tokens' worth at 4.5/s)
    settings.REDIS_URL = ""
    clock = [1_000.0]
    monkeypatch.setattr(budget.time, "time", lambda: clock[0])
    read_rows = budget._bucket_rows
    stalls = [0.5]

    def stalled_read(**kwargs):
        rows = read_rows(**kwargs)
        clock[0] += stalls.pop() if stalls else 0.0
        return rows

    monkeypatch.setattr(budget, "_bucket_rows", stalled_read)
    assert send_budget_try(chat_id="oc_stall", app_id="cli_a") is True
    # when: another bot sends into the chat the moment the first one's token was taken
    second = send_budget_try(chat_id="oc_stall", app_id="cli_b")
    # then: refused, and a token again one interval (1 / 4.5 s) after the first was spent, not before
    assert second is False
    clock[0] += 1 / 4.5 - 0.01
    assert send_budget_try(chat_id="oc_stall", app_id="cli_b") is False
    clock[0] += 0.02
    assert send_budget_try(chat_id="oc_stall", app_id="cli_b") is True


@pytest.mark.django_db
def test_r4_the_app_budget_holds_across_chats(settings):
    # given: one app sending into many chats at once
    settings.REDIS_URL = ""
    settings.FEISHU_APP_SENDS_PER_SECOND = 2
    # when
    results = [send_budget_try(chat_id=f"oc_{n}", app_id="cli_busy") for n in range(3)]
    # then
    assert results == [True, False, False]


def test_r4_a_redis_that_went_away_never_fails_a_send(settings, private_redis, caplog):
    # given: the Redis budget in use, then its server stopped (the fault suite's "Redis down during intake")
    settings.REDIS_URL = private_redis
    assert send_budget_try(chat_id="oc_away", app_id="cli_away") is True
    port = int(private_redis.rsplit(":", 1)[1].split("/")[0])
    subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], check=False, capture_output=True)

    def sleep(seconds: float) -> None:
        raise AssertionError(f"waited {seconds} s for a budget Redis cannot keep")

    # when
    send_budget_acquire(chat_id="oc_away", app_id="cli_away", sleep=sleep)
    # then: the send goes now (it never waits for a token), and the log says the budget was not kept
    assert "send budget unavailable, sending without it" in caplog.text


def _recording_takes(mocker, stub) -> list[int]:
    """Each budget take feishu_call makes, as the number of tenant token fetches the stub had seen by then."""
    takes: list[int] = []
    real_acquire = budget.send_budget_acquire

    def acquire(**kwargs):
        takes.append(len(stub.requests_to("token")))
        return real_acquire(**kwargs)

    mocker.patch("feishu.outbound.budget.send_budget_acquire", side_effect=acquire)
    return takes


@pytest.mark.django_db(transaction=True)
def test_r4_a_bots_first_send_takes_its_budget_after_the_tenant_token_is_fetched(
    settings, feishu_stub, make_feishu_bot, mocker
):
    # given: a bot that has never called Feishu (no client, no tenant token cached): the token fetch is a
    # round trip of its own, up to a second under load, that must not sit between the take and the send
    settings.REDIS_URL = ""
    bot = make_feishu_bot()
    takes = _recording_takes(mocker, feishu_stub)
    # when
    feishu_sends.message_create(bot=bot, chat_id=CHAT, text="first", uuid="first-1", budget=SendBudget(chat_id=CHAT))
    # then: one take, made once the token was there; the request that followed is the send itself
    assert takes == [1]
    assert [r.route for r in feishu_stub.requests] == ["token", "create"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("first_taken", "expected_takes"), [(False, 2), (True, 1)])
def test_r4_a_resend_after_a_rate_limit_answer_takes_a_send_of_its_own(
    settings, feishu_stub, make_feishu_bot, mocker, first_taken, expected_takes
):
    # given: Feishu answers the first send 429/99991400 (another sender got there first)
    settings.REDIS_URL = ""
    bot = make_feishu_bot()
    feishu_stub.fail_next(
        "create", status=429, code=99991400, msg="rate limited", headers={"x-ogw-ratelimit-reset": "0"}
    )
    takes = _recording_takes(mocker, feishu_stub)
    waits: list[float] = []
    # when: first_taken is the intermediate card update's case (send_budget_try paid for the first request)
    feishu_sends.message_create(
        bot=bot,
        chat_id=CHAT,
        text="again",
        uuid="again-1",
        sleep=waits.append,
        budget=SendBudget(chat_id=CHAT, first_taken=first_taken),
    )
    # then: the resend took its own send before it left, whoever paid for the first request
    assert len(takes) == expected_takes
    assert [r.status for r in feishu_stub.requests_to("create")] == [429, 200]
