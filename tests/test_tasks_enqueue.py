"""task_enqueue: a broker that cannot take the message is logged and answered False; any other error is a bug
and propagates. The Redis client's errors are recognised without importing redis at module load (issue 11)."""

import logging

import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from core.tasks_enqueue import task_enqueue


class RaisingTask:
    """A task whose apply_async raises `error`: what the broker does when it is down."""

    def __init__(self, error: Exception):
        self.error = error

    def apply_async(self, **kwargs):
        raise self.error


@pytest.mark.parametrize(
    "error",
    [OperationalError("down"), ConnectionRefusedError("refused"), RedisConnectionError("gone"), ResponseError("ro")],
    ids=["kombu", "socket", "redis-connection", "redis-response"],
)
def test_a_broker_error_is_logged_and_answered_false(error, caplog):
    caplog.set_level(logging.WARNING, logger="core.tasks_enqueue")
    # when
    queued = task_enqueue(task=RaisingTask(error), args=[7, "x"], what="turn")
    # then
    assert queued is False
    [record] = caplog.records
    assert (record.what, record.task_args, record.error) == ("turn", [7], type(error).__name__)


def test_an_error_that_is_not_the_brokers_propagates():
    with pytest.raises(TypeError):
        task_enqueue(task=RaisingTask(TypeError("bad args")), args=[1], what="turn")
