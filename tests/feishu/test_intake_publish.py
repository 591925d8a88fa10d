"""F2 intake's lean publish (issue 5): the webhook enqueues with one LPUSH of the message `apply_async` would send.

The envelope is compared with the one Celery and kombu really produce (kombu's in-memory virtual transport writes
the same envelope as its Redis transport), so a worker consumes it like any task; the real-worker run
(tests/feishu/test_worker.py, PostgreSQL + Redis) takes this path end to end.
"""

import base64
import json

import pytest
import redis
from kombu import Connection

from amuxweb.celery import app
from amuxweb.feishu.models import InboundEvent
from amuxweb.feishu.services import intake
from amuxweb.feishu.tasks import inbound_event_process

pytestmark = pytest.mark.django_db


class RecordingRedis:
    """Stands in for the per-process redis-py client: records LPUSHes, or fails like a Redis that is down."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.pushed: list[tuple[str, dict]] = []

    def lpush(self, key: str, value: str) -> int:
        if self.error is not None:
            raise self.error
        self.pushed.append((key, json.loads(value)))
        return len(self.pushed)


@pytest.fixture
def redis_broker(monkeypatch):
    """Celery configured for a Redis broker, not eager (as in production); the client is a RecordingRedis."""
    recorder = RecordingRedis()
    monkeypatch.setattr(intake, "_push_plans", {})
    monkeypatch.setattr(redis.Redis, "from_url", classmethod(lambda cls, url, **kwargs: recorder))
    saved = (app.conf.broker_url, app.conf.task_always_eager)
    app.conf.broker_url, app.conf.task_always_eager = "redis://127.0.0.1:6379/15", False
    try:
        yield recorder
    finally:
        app.conf.broker_url, app.conf.task_always_eager = saved


def _apply_async_envelope(args: list) -> dict:
    """What `apply_async` publishes for inbound_event_process(*args), as kombu's virtual transport stores it."""
    with Connection("memory://") as connection:
        producer = app.amqp.Producer(connection)
        inbound_event_process.apply_async(args=args, producer=producer, retry=False)
        return connection.default_channel._get("celery")


def _comparable(envelope: dict) -> dict:
    """The envelope with its per-message ids replaced and its body decoded."""
    envelope = json.loads(json.dumps(envelope))
    assert envelope["headers"]["root_id"] == envelope["headers"]["id"] == envelope["properties"]["correlation_id"]
    envelope["headers"]["id"] = envelope["headers"]["root_id"] = envelope["properties"]["correlation_id"] = "ID"
    envelope["properties"]["delivery_tag"] = "TAG"
    envelope["body"] = json.loads(base64.b64decode(envelope["body"]))
    return envelope


def test_f2_lean_publish_sends_exactly_the_message_apply_async_sends(redis_broker):
    # given: what Celery's full path would publish
    expected = _comparable(_apply_async_envelope([41]))
    # when
    pushed = intake.task_message_push(task=inbound_event_process, args=[41])
    # then: one LPUSH onto the default queue's list, the same message but for its ids
    assert pushed is True
    [(key, envelope)] = redis_broker.pushed
    assert key == "celery"
    assert _comparable(envelope) == expected
    assert envelope["headers"]["task"] == "amuxweb.feishu.tasks.inbound_event_process"
    assert _comparable(envelope)["body"] == [
        [41],
        {},
        {"callbacks": None, "errbacks": None, "chain": None, "chord": None},
    ]
    assert envelope["properties"]["delivery_info"] == {"exchange": "", "routing_key": "celery"}


def test_f2_webhook_stores_then_pushes_one_task_message(feishu, make_feishu_bot, redis_broker):
    # given
    bot = make_feishu_bot()
    # when
    response, _ = feishu.say(bot, text="hello", mention=[bot], message_id="om_lean")
    # then: stored and enqueued once, through the lean path
    assert response.status_code == 200
    event = InboundEvent.objects.get()
    [(key, envelope)] = redis_broker.pushed
    assert (key, _comparable(envelope)["body"][0]) == ("celery", [event.pk])


def test_f2_lean_publish_with_redis_down_answers_200_and_leaves_the_event_to_the_sweeper(
    feishu, make_feishu_bot, redis_broker, caplog
):
    # given: Redis refuses connections
    redis_broker.error = redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    bot = make_feishu_bot()
    # when
    response, _ = feishu.say(bot, text="are you there?", mention=[bot])
    # then: acknowledged and stored pending (the sweeper re-enqueues it), the outage logged with ids only
    assert response.status_code == 200
    event = InboundEvent.objects.get()
    assert event.status == InboundEvent.Status.PENDING
    [record] = [r for r in caplog.records if r.getMessage().startswith("task not enqueued")]
    assert (record.levelname, record.what, record.task_args, record.error) == (
        "WARNING",
        "inbound_event",
        [event.pk],
        "ConnectionError",
    )


def test_f2_eager_celery_uses_the_full_apply_async_path(redis_broker, mocker):
    # given: eager Celery (the embedded default without a broker)
    app.conf.task_always_eager = True
    enqueue = mocker.patch.object(inbound_event_process, "apply_async")
    # when
    enqueued = intake.inbound_event_enqueue(event_pk=5)
    # then
    assert enqueued is True
    enqueue.assert_called_once_with(args=[5], retry=False)
    assert redis_broker.pushed == []
