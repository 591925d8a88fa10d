"""The bridge's own records are kept past Feishu's retry window (F2) and pruned after the retention."""

from datetime import timedelta

import pytest
from django.utils import timezone

from feishu.models import CatchupRun, DiscussWake, InboundEvent, SandboxCall
from feishu.tasks import bridge_records_prune
from tests.agents.factories import BotFactory

pytestmark = pytest.mark.django_db

RETENTION = timedelta(days=30)


def _event(bot, *, message_id: str, status: str, age: timedelta) -> InboundEvent:
    event = InboundEvent.objects.create(
        bot=bot, event_id=f"ev_{message_id}", message_id=message_id, event_type="im.message.receive_v1", payload={}
    )
    InboundEvent.objects.filter(pk=event.pk).update(status=status, received_at=timezone.now() - age)
    return event


def _wake(bot, *, root: str, status: str, age: timedelta) -> DiscussWake:
    now = timezone.now()
    wake = DiscussWake.objects.create(
        bot=bot,
        chat_id="oc_1",
        root_msg_id=root,
        status=status,
        last_message_id=root,
        first_message_at=now,
        due_at=now,
        deadline_at=now,
    )
    DiscussWake.objects.filter(pk=wake.pk).update(updated_at=now - age)
    return wake


def test_f2_finished_records_older_than_the_retention_are_pruned_and_everything_else_is_kept():
    # given
    bot = BotFactory()
    old = RETENTION + timedelta(hours=1)
    old_done = _event(bot, message_id="om_old_done", status=InboundEvent.Status.DONE, age=old)
    old_ignored = _event(bot, message_id="om_old_ignored", status=InboundEvent.Status.IGNORED, age=old)
    old_pending = _event(bot, message_id="om_old_pending", status=InboundEvent.Status.PENDING, age=old)
    past_retry_window = _event(bot, message_id="om_8h", status=InboundEvent.Status.DONE, age=timedelta(hours=8))
    _wake(bot, root="om_w1", status=DiscussWake.Status.DONE, age=old)
    open_wake = _wake(bot, root="om_w2", status=DiscussWake.Status.PENDING, age=old)
    finished_catchup, open_catchup = (
        CatchupRun.objects.create(bot=bot, trigger="reconnect", since=timezone.now()) for _ in "ab"
    )
    CatchupRun.objects.filter(pk=finished_catchup.pk).update(finished_at=timezone.now() - old)
    CatchupRun.objects.update(requested_at=timezone.now() - old)
    # when
    removed = bridge_records_prune.delay().get()
    # then
    assert removed == {"inbound_events": 2, "discuss_wakes": 1, "arbitrations": 0, "catchups": 1, "sandbox_calls": 0}
    remaining = set(InboundEvent.objects.values_list("pk", flat=True))
    assert remaining == {old_pending.pk, past_retry_window.pk}
    assert not remaining & {old_done.pk, old_ignored.pk}
    assert set(DiscussWake.objects.values_list("pk", flat=True)) == {open_wake.pk}
    assert list(CatchupRun.objects.values_list("pk", flat=True)) == [open_catchup.pk]  # a catch-up still owed


def _sandbox_call(*, path: str, age: timedelta) -> SandboxCall:
    call = SandboxCall.objects.create(app_id="sandbox-1", method="POST", path=path, body={})
    SandboxCall.objects.filter(pk=call.pk).update(created_at=timezone.now() - age)
    return call


def test_sandbox_calls_older_than_their_retention_are_pruned_and_newer_ones_kept(settings):
    # given: the playground's recorded Feishu calls, one past the retention and one inside it
    settings.AMUX_SANDBOX_CALL_RETENTION_DAYS = 7
    _sandbox_call(path="/open-apis/im/v1/messages/old", age=timedelta(days=7, hours=1))
    recent = _sandbox_call(path="/open-apis/im/v1/messages/recent", age=timedelta(days=6))
    # when
    removed = bridge_records_prune.delay().get()
    # then
    assert removed == {"inbound_events": 0, "discuss_wakes": 0, "arbitrations": 0, "catchups": 0, "sandbox_calls": 1}
    assert list(SandboxCall.objects.values_list("pk", flat=True)) == [recent.pk]
