"""Retention (C13): 30 days; writes prune (throttled, bounded); a daily beat task; a command with a count."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from tests.threadcontext.conftest import CHAT_ID, CODER, PLANNER, ROOT_ID, inbound, workspace_create
from threadcontext.models import ThreadContextDecision, ThreadContextItem, ThreadEvent
from threadcontext.services import thread_event_record_agent_output, thread_event_record_inbound
from threadcontext.services.retention import (
    PRUNE_INTERVAL_SECONDS,
    prune_clock_reset,
    thread_context_prune,
    thread_context_prune_if_due,
)
from threadcontext.tasks import thread_context_prune as prune_task

pytestmark = pytest.mark.django_db


def record_outputs(count: int, *, prefix: str) -> None:
    for index in range(count):
        thread_event_record_agent_output(
            **PLANNER, chat_id=CHAT_ID, root_msg_id=ROOT_ID, message_id=f"{prefix}_{index}", text=f"{prefix} {index}"
        )


def age(days: float, *, message_prefix: str) -> None:
    when = timezone.now() - timedelta(days=days)
    ThreadEvent.objects.filter(message_id__startswith=message_prefix).update(created_at=when)


def decision(days_old: float) -> ThreadContextDecision:
    row = ThreadContextDecision.objects.create(chat_id=CHAT_ID, root_msg_id=ROOT_ID, bridge_id="b", bot_profile="p")
    ThreadContextDecision.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(days=days_old))
    return row


def test_c13_retention_is_30_days():
    assert settings.AMUX_CONTEXT_RETENTION_DAYS == 30


def test_c13_prune_removes_expired_events_with_their_items_and_old_decisions_only():
    # given
    record_outputs(3, prefix="om_old")
    record_outputs(2, prefix="om_new")
    age(31, message_prefix="om_old")
    age(29, message_prefix="om_new")
    old_decision, new_decision = decision(31), decision(1)
    # when
    result = thread_context_prune()
    # then
    assert (result.events, result.items, result.decisions) == (3, 3, 1)
    assert sorted(ThreadEvent.objects.values_list("message_id", flat=True)) == ["om_new_0", "om_new_1"]
    assert ThreadContextItem.objects.count() == 2
    assert list(ThreadContextDecision.objects.values_list("pk", flat=True)) == [new_decision.pk]
    assert old_decision.pk != new_decision.pk


def test_c13_prune_works_in_bounded_batches_until_done():
    record_outputs(7, prefix="om_old")
    age(40, message_prefix="om_old")
    progress: list[int] = []
    result = thread_context_prune(batch_size=3, on_progress=progress.append)
    assert result.events == 7
    assert progress == [3, 3, 1]
    assert ThreadEvent.objects.count() == 0


def test_c13_writing_an_event_prunes_expired_events():
    # given: an expired thread, and a process that has not pruned for over a minute
    record_outputs(2, prefix="om_old")
    age(31, message_prefix="om_old")
    prune_clock_reset()
    # when: a new message is recorded
    thread_event_record_inbound(message=inbound(CODER, "fresh"), workspace=workspace_create(CODER))
    # then
    assert list(ThreadEvent.objects.values_list("text", flat=True)) == ["fresh"]
    assert list(ThreadContextItem.objects.values_list("text", flat=True)) == ["fresh"]


def test_c13_on_write_pruning_runs_at_most_once_a_minute_per_process(mocker):
    # given: a controlled clock; the first write of the process prunes (nothing is expired yet)
    clock = {"now": 1000.0}
    mocker.patch("threadcontext.services.retention.time.monotonic", side_effect=lambda: clock["now"])
    prune_clock_reset()
    record_outputs(1, prefix="om_old")
    age(31, message_prefix="om_old")
    # when: a write 59 s later does not prune
    clock["now"] = 1000.0 + PRUNE_INTERVAL_SECONDS - 1
    record_outputs(1, prefix="om_a")
    assert ThreadEvent.objects.filter(message_id__startswith="om_old").count() == 1
    assert thread_context_prune_if_due() is None
    # then: a write a minute after the last prune does
    clock["now"] = 1000.0 + PRUNE_INTERVAL_SECONDS
    record_outputs(1, prefix="om_b")
    assert ThreadEvent.objects.filter(message_id__startswith="om_old").count() == 0
    assert sorted(ThreadEvent.objects.values_list("message_id", flat=True)) == ["om_a_0", "om_b_0"]


def test_c13_the_daily_beat_task_prunes():
    record_outputs(2, prefix="om_old")
    age(31, message_prefix="om_old")
    assert prune_task.apply().get() == {"events": 2, "items": 2, "decisions": 0}
    assert settings.CELERY_BEAT_SCHEDULE["thread-context-prune"] == {
        "task": "threadcontext.tasks.thread_context_prune",
        "schedule": 24 * 3600.0,
    }


def test_c13_prune_command_shows_progress_and_the_count_removed():
    record_outputs(4, prefix="om_old")
    age(31, message_prefix="om_old")
    decision(45)
    out, err = io.StringIO(), io.StringIO()
    call_command("feishu_context_prune", "--batch-size", "2", stdout=out, stderr=err)
    assert out.getvalue() == "Removed 4 events, 4 items and 1 decisions (9 rows).\n"
    assert "pruning" in err.getvalue()
    assert "5/5" in err.getvalue()
    assert ThreadEvent.objects.count() == 0


@pytest.mark.parametrize("batch_size", ["0", "-1"])
def test_c13_prune_command_refuses_a_batch_size_below_one_and_removes_nothing(batch_size):
    # given an expired event (a batch size of 0 used to loop forever, a negative one to raise a traceback)
    record_outputs(1, prefix="om_old")
    age(31, message_prefix="om_old")
    out, err = io.StringIO(), io.StringIO()

    # when / then: a clear command error, nothing removed
    with pytest.raises(CommandError, match=f"^--batch-size must be at least 1, not {batch_size}.$"):
        call_command("feishu_context_prune", "--batch-size", batch_size, stdout=out, stderr=err)
    assert out.getvalue() == ""
    assert ThreadEvent.objects.count() == 1


def test_c13_prune_service_refuses_a_batch_size_below_one():
    with pytest.raises(ValueError, match="^batch_size must be at least 1, not 0.$"):
        thread_context_prune(batch_size=0)


@pytest.mark.parametrize("table", ["threadcontext_threadevent", "threadcontext_threadcontextdecision"])
def test_c13_retention_reads_expired_rows_through_a_created_at_index(table):
    # given the migrated database; when its indexes are read
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)

    # then: the prune's `created_at < cutoff` lookup has an index of its own (no table walk when nothing expired)
    assert any(c["index"] and c["columns"] == ["created_at"] for c in constraints.values())
