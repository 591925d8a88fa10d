"""The intake's relay (core.tasks_relay, issue 11): the webhook commits the event and hands its task to this
process's publisher thread, which pushes batches to Redis. A relayed message is exactly what `apply_async` sends,
a real worker runs it, a broker outage loses nothing (the sweeper), and a normal exit publishes what is queued."""

import base64
import json
import logging
import os
import subprocess
import sys
import uuid
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from celery.exceptions import CDeprecationWarning
from django.conf import settings
from kombu import Connection

from amuxweb.celery import app
from core import tasks_relay
from core.tasks_relay import message_render, message_template_capture, relay_applies, relay_flush, task_relay
from feishu.inbound.intake import inbound_events_sweep
from feishu.models import InboundEvent
from feishu.tasks import inbound_event_process
from tests.feishu.conftest import bot_open_id
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL, reason="needs Redis: set REDIS_URL (CI's PostgreSQL + Redis run)")

# Its own queue, which no worker consumes, so the test reads back exactly what was pushed.
PROBE_QUEUE = f"relay-probe-{uuid.uuid4().hex[:8]}"


def _relay_probe(value: int) -> int:  # pragma: no cover - never run: only its messages are inspected
    return value


# A task's own `queue` is deprecated by Celery in favour of task_routes (read once at start-up): fine for a test task.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", CDeprecationWarning)
    relay_probe = app.task(name="tests.feishu.test_task_relay.relay_probe", queue=PROBE_QUEUE)(_relay_probe)
    relay_probe.name  # noqa: B018 - binds the task here, where the warning is silenced


@contextmanager
def celery_conf(**changes):
    """Celery settings changed for a block. Not monkeypatch: an autouse fixture of the suite that uses monkeypatch
    is torn down after the suite's eager fixture, and would put back the eagerness it saw instead of the original."""
    saved = {name: app.conf[name] for name in changes}
    app.conf.update(changes)
    try:
        yield
    finally:
        app.conf.update(saved)


@pytest.fixture
def relay_live():
    """Celery as in production (not eager), and a fresh publisher for this test."""
    saved = tasks_relay._current
    tasks_relay._current = None
    try:
        with celery_conf(task_always_eager=False):
            yield
            assert relay_flush(timeout=10)
    finally:
        tasks_relay._current = saved


def _apply_async_message(task, *, args: list, task_id: str) -> dict:
    """What `task.apply_async` hands the transport, captured on kombu's in-memory transport (test's own copy)."""
    with Connection("memory://") as memory:
        channel = memory.default_channel
        task.apply_async(args=args, task_id=task_id, producer=memory.Producer(channel), retry=False)
        queue = task.app.amqp.router.route({}, task.name, args, {}, task)["queue"].name
        return channel._get(queue)


def test_the_rendered_message_is_the_one_apply_async_builds(relay_live):
    # given: the template this process captures for the intake task
    template = message_template_capture(inbound_event_process, args=[1])
    assert template is not None
    expected = _apply_async_message(inbound_event_process, args=[4711], task_id="f0e1d2c3-0000-4000-8000-000000000001")
    # when: the relay renders the same task id and args
    with Connection("memory://") as memory:
        channel = memory.default_channel
        rendered = message_render(
            template,
            args=[4711],
            task_id="f0e1d2c3-0000-4000-8000-000000000001",
            reply_to=app.thread_oid,
            delivery_tag=expected["properties"]["delivery_tag"],
            encode_body=lambda text: channel.encode_body(text, channel.body_encoding),
        )
    # then: the same message, routed to the intake queue
    assert rendered == expected
    assert (template.exchange, template.routing_key) == ("", settings.QUEUE_INTAKE)
    assert json.loads(channel.decode_body(rendered["body"], "base64"))[0] == [4711]


def test_eager_celery_and_a_non_redis_broker_keep_the_inline_publish(mocker):
    # given: the test suite's eager Celery on the in-memory broker
    enqueue = mocker.patch.object(inbound_event_process, "apply_async")
    assert relay_applies(inbound_event_process) is False
    # when / then: the task goes through apply_async at once, as before the relay
    task_relay(task=inbound_event_process, args=[5], what="inbound_event")
    enqueue.assert_called_once_with(args=[5], retry=False)
    # and: not eager, but a broker that is not Redis (the embedded SQLite broker is kombu's SQLAlchemy transport)
    with celery_conf(task_always_eager=False, broker_url="memory://"):
        assert relay_applies(inbound_event_process) is False


def test_a_forked_child_starts_its_own_publisher(relay_live):
    parent = tasks_relay._publisher()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe and exits at once
        try:
            publisher = tasks_relay._publisher()
            verdict = publisher is not parent and publisher.pid == os.getpid() and publisher._thread.is_alive()
            os.write(write_end, b"yes" if verdict else b"no")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 8)
    os.waitpid(child, 0)
    os.close(read_end)
    assert answer == b"yes"
    assert tasks_relay._publisher() is parent


@pytest.mark.django_db
def test_broker_down_the_webhook_answers_200_and_the_sweeper_publishes_later(
    relay_live, feishu, make_feishu_bot, caplog
):
    # given: the relay is live and Redis refuses connections
    caplog.set_level(logging.WARNING, logger="core.tasks_relay")
    bot = make_feishu_bot()
    with celery_conf(broker_url="redis://127.0.0.1:1/0"):
        assert relay_applies(inbound_event_process) is True
        # when
        response, _ = feishu.say(bot, text="are you there?", mention=[bot])
        # then: acknowledged and stored; the relay's batch failed and said so; the event waits for the sweeper
        assert response.status_code == 200
        assert relay_flush(timeout=30)
    [record] = [r for r in caplog.records if r.getMessage().startswith("tasks not relayed")]
    event = InboundEvent.objects.get()
    assert (record.count, record.what, record.task_args) == (1, ["inbound_event"], [event.pk])
    assert event.status == InboundEvent.Status.PENDING
    # when: Redis is back (here: eager Celery again) and the sweeper runs past the pending threshold
    InboundEvent.objects.filter(pk=event.pk).update(received_at=event.received_at.replace(year=2000))
    with celery_conf(task_always_eager=True):
        swept = inbound_events_sweep()
    # then
    assert swept == [event.pk]
    assert InboundEvent.objects.get().status == InboundEvent.Status.DONE


@needs_redis
def test_relayed_messages_are_byte_for_byte_apply_asyncs_in_redis(relay_live):
    broker = redis.Redis.from_url(REDIS_URL)
    broker.delete(PROBE_QUEUE)
    try:
        # when: the same task published inline and through the relay (a batch of three)
        relay_probe.apply_async(args=[7], retry=False)
        for value in (7, 8, 9):
            task_relay(task=relay_probe, args=[value], what="probe")
        assert relay_flush(timeout=10)
        # then: four messages on the task's queue, the relayed ones equal to the inline one but for their ids
        messages = [json.loads(raw) for raw in reversed(broker.lrange(PROBE_QUEUE, 0, -1))]
    finally:
        broker.delete(PROBE_QUEUE)
    assert len(messages) == 4
    ids = [message["headers"]["id"] for message in messages]
    assert len(set(ids)) == 4
    for message in messages:
        assert message["headers"]["root_id"] == message["properties"]["correlation_id"] == message["headers"]["id"]
        message["headers"]["id"] = message["headers"]["root_id"] = message["properties"]["correlation_id"] = "id"
        message["properties"]["delivery_tag"] = "tag"
    inline, relayed = messages[0], messages[1]
    assert relayed == inline
    assert [json.loads(base64.b64decode(m["body"]))[0] for m in messages[1:]] == [[7], [8], [9]]


@needs_redis
def test_a_normal_exit_publishes_what_is_still_queued():
    # given: a process that relays a task and exits at once (its thread has had no time to publish)
    queue = f"relay-exit-{uuid.uuid4().hex[:8]}"
    code = "\n".join(
        [
            "import warnings",
            "import django",
            "django.setup()",
            "from amuxweb.celery import app",
            "from core.tasks_relay import task_relay",
            "warnings.simplefilter('ignore')  # the task's own queue attribute, as above",
            "def relay_exit_probe(): pass",
            f"probe = app.task(name='relay_exit_probe', queue={queue!r})(relay_exit_probe)",
            "task_relay(task=probe, args=[], what='probe')",
        ]
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "amuxweb.settings.local", "REDIS_URL": REDIS_URL}
    broker = redis.Redis.from_url(REDIS_URL)
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True)
        # then: its message is in the broker
        [raw] = broker.lrange(queue, 0, -1)
    finally:
        broker.delete(queue)
    assert json.loads(raw)["headers"]["task"] == "relay_exit_probe"
    assert b"cannot rebuild" not in done.stderr  # published by the relay (a task without args), not apply_async


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_the_relayed_intake_task(celery_worker, feishu, make_feishu_bot):
    # given: a bot whose replies are recorded (no app secret), Celery not eager on Redis: the relay is live
    bot = make_feishu_bot(feishu_app_secret="")
    bot.feishu_bot_open_id = bot_open_id(bot)  # known: the worker needs no Feishu call to learn it
    bot.save()
    assert relay_applies(inbound_event_process) is True
    # when
    response, _ = feishu.say(bot, text="relayed?", mention=[bot])
    # then: the worker claimed and processed the event the relay published
    assert response.status_code == 200
    event = InboundEvent.objects.get(bot=bot)
    wait_for(
        lambda: InboundEvent.objects.filter(pk=event.pk, status="done").exists(), worker=celery_worker, what="done"
    )
    assert InboundEvent.objects.get(pk=event.pk).attempts == 1
