"""C13 through a real Celery worker (REDIS_URL set, PostgreSQL): the beat task, sent by name, prunes."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from amuxweb.celery import app
from threadcontext.models import ThreadContextItem, ThreadEvent
from threadcontext.services import thread_event_record_agent_output

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

WAIT_SECONDS = 60


def test_c13_daily_prune_task_runs_on_a_real_worker(celery_worker):
    # given: two expired events with their items, one fresh
    for index in range(3):
        thread_event_record_agent_output(
            bridge_id="cli_planner",
            bot_profile="planner",
            chat_id="oc_worker",
            root_msg_id="om_root",
            message_id=f"om_{index}",
            text=f"output {index}",
        )
    ThreadEvent.objects.filter(message_id__in=["om_0", "om_1"]).update(created_at=timezone.now() - timedelta(days=31))
    # when: beat's entry is sent by its task name, as beat does
    app.send_task("threadcontext.tasks.thread_context_prune")
    # then
    deadline = time.monotonic() + WAIT_SECONDS
    while ThreadEvent.objects.count() != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(ThreadEvent.objects.values_list("message_id", flat=True)) == ["om_2"], celery_worker.log_tail()
    assert list(ThreadContextItem.objects.values_list("text", flat=True)) == ["output 2"]
