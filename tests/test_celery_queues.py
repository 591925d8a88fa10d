"""Issue 11: one Celery queue per stage, so a reply never waits behind intake that arrived after it."""

import pytest
from celery.exceptions import Retry
from django.conf import settings

from agents.services.turns import TurnRetryLater
from agents.tasks import automation_run_task, turn_run_task, turns_sweep_task
from amuxweb.celery import app
from feishu.tasks import discuss_wake_fire_task, inbound_event_process, inbound_events_sweep


@pytest.mark.parametrize(
    ("task", "queue"),
    [
        (inbound_event_process, "intake"),
        (turn_run_task, "turns"),
        (automation_run_task, "turns"),
        (discuss_wake_fire_task, "probe"),
        (inbound_events_sweep, "maintenance"),
        (turns_sweep_task, "maintenance"),
    ],
)
def test_each_task_is_routed_to_its_stage_queue(task, queue):
    route = app.amqp.router.route({}, task.name, args=[1])
    assert route["queue"].name == queue


def test_a_worker_started_without_q_consumes_every_queue_replies_first():
    # `celery worker` without -Q consumes app.amqp.queues; Redis takes them in this order ("priority")
    assert list(app.amqp.queues.consume_from) == ["deliveries", "turns", "probe", "intake", "maintenance"]


def test_a_delivery_retry_goes_to_the_deliveries_queue_and_a_model_retry_stays_on_turns(mocker):
    # given: the turn's delivery fails for now, then (second call) its model call does
    mocker.patch(
        "agents.services.turns.turn_run",
        side_effect=[
            TurnRetryLater("feishu 429", countdown_seconds=2, attempt=1, is_delivery=True),
            TurnRetryLater("model 503", countdown_seconds=4, attempt=1),
        ],
    )
    retry = mocker.patch.object(turn_run_task, "retry", side_effect=Retry())
    # when: the task runs as a worker runs it (not eagerly)
    for _ in range(2):
        with pytest.raises(Retry):
            turn_run_task.run(7)
    # then
    delivery, model = (call.kwargs for call in retry.call_args_list)
    assert (delivery["queue"], delivery["countdown"]) == (settings.QUEUE_DELIVERIES, 2)
    assert "queue" not in model and model["countdown"] == 4
