"""Admin lists of inbound events, deliveries and discuss wakes; the reprocess action."""

import pytest
from django.test import TestCase

from feishu.models import InboundEvent
from tests.agents.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", ["inboundevent", "outbounddelivery", "discusswake"])
def test_admin_lists_render(admin_client, model):
    response = admin_client.get(f"/admin/feishu/{model}/")

    assert response.status_code == 200


def test_admin_reprocess_runs_a_failed_event_again(admin_client, feishu, make_feishu_bot):
    # given: an event that failed
    bot = make_feishu_bot()
    feishu.say(bot, text="hello", mention=[bot])
    event = InboundEvent.objects.get()
    InboundEvent.objects.filter(pk=event.pk).update(status="failed", error="boom")
    # when
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = admin_client.post(
            "/admin/feishu/inboundevent/", {"action": "reprocess", "_selected_action": [event.pk]}
        )
    # then: processed again; the turn and the reply already existed, nothing is sent twice
    assert response.status_code == 302
    event.refresh_from_db()
    assert (event.status, event.error, event.attempts) == ("done", "", 2)
    assert len(feishu.stub.sent) == 1


def test_admin_event_detail_shows_the_payload(admin_client, feishu, make_feishu_bot):
    bot = make_feishu_bot()
    feishu.say(bot, text="hello there", mention=[bot])
    event = InboundEvent.objects.get()

    response = admin_client.get(f"/admin/feishu/inboundevent/{event.pk}/change/")

    assert response.status_code == 200
    assert "hello there" in response.content.decode()


def _list_queries(admin_client, model: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(f"/admin/feishu/{model}/").status_code == 200
    return len(queries)


def test_admin_lists_cost_the_same_queries_for_one_row_or_many(admin_client, make_feishu_bot):
    """No N+1: each list's query count does not grow with its rows (bots and turns are joined, not fetched)."""
    from datetime import timedelta

    from django.utils import timezone

    from agents.models import Turn
    from feishu.models import DiscussWake, OutboundDelivery
    from tests.agents.factories import ThreadFactory

    def rows(index: int) -> None:
        bot = make_feishu_bot()
        turn = Turn.objects.create(
            bot=bot, thread=ThreadFactory(bot=bot), trigger="mention", source_message_id=f"om_{index}"
        )
        InboundEvent.objects.create(
            bot=bot, event_id=f"e{index}", message_id=f"om_{index}", event_type="im.message.receive_v1", payload={}
        )
        OutboundDelivery.objects.create(bot=bot, turn=turn, chat_id="oc", uuid=f"u{index}", content="hi")
        now = timezone.now()
        DiscussWake.objects.create(
            bot=bot,
            chat_id="oc",
            root_msg_id=f"om_{index}",
            status="done",
            last_message_id=f"om_{index}",
            first_message_at=now,
            due_at=now,
            deadline_at=now + timedelta(seconds=30),
            turn=turn,
        )

    rows(0)
    one = {model: _list_queries(admin_client, model) for model in ("inboundevent", "outbounddelivery", "discusswake")}
    for index in range(1, 6):
        rows(index)
    many = {model: _list_queries(admin_client, model) for model in ("inboundevent", "outbounddelivery", "discusswake")}

    assert many == one


def test_explain_pages_need_the_view_permission_on_discuss_wakes_P11(client, make_feishu_bot):
    """P11: the explain page shows context; a staff user without view permission on wakes gets a 403."""
    from django.contrib.auth.models import Permission
    from django.utils import timezone

    from agents.models import Turn
    from feishu.models import DiscussWake
    from tests.agents.factories import ThreadFactory

    bot = make_feishu_bot()
    turn = Turn.objects.create(bot=bot, thread=ThreadFactory(bot=bot), trigger="discuss", source_message_id="om_1")
    now = timezone.now()
    wake = DiscussWake.objects.create(
        bot=bot,
        chat_id="oc",
        root_msg_id="om_1",
        status="done",
        last_message_id="om_1",
        first_message_at=now,
        due_at=now,
        deadline_at=now,
        turn=turn,
    )
    staff = UserFactory(is_staff=True)
    client.force_login(staff)
    pages = [f"/admin/feishu/discusswake/{wake.pk}/explain/", f"/admin/feishu/discusswake/turn/{turn.pk}/explain/"]

    denied = [client.get(page).status_code for page in pages]
    staff.user_permissions.add(Permission.objects.get(codename="view_discusswake"))
    wakes_only = [client.get(page).status_code for page in pages]
    staff.user_permissions.add(Permission.objects.get(codename="view_turn"))
    allowed = [client.get(page).status_code for page in pages]

    # issue 30, finding 8: the wake's turn is on both pages, so both need the turn's view permission too
    assert (denied, wakes_only, allowed) == ([403, 403], [403, 403], [200, 200])


def test_admin_reprocess_costs_the_same_queries_for_one_event_or_many(admin_client, make_feishu_bot, mocker):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from feishu.tasks import inbound_event_process

    enqueue = mocker.patch.object(inbound_event_process, "apply_async")
    bot = make_feishu_bot()
    events = [
        InboundEvent.objects.create(
            bot=bot, event_id=f"e{i}", message_id=f"om_{i}", event_type="im.message.receive_v1", payload={}
        )
        for i in range(4)
    ]

    def reprocess(selected) -> int:
        with CaptureQueriesContext(connection) as queries, TestCase.captureOnCommitCallbacks(execute=True):
            response = admin_client.post(
                "/admin/feishu/inboundevent/", {"action": "reprocess", "_selected_action": [e.pk for e in selected]}
            )
        assert response.status_code == 302
        return len(queries)

    assert reprocess(events[:1]) == reprocess(events[1:])
    assert sorted(call.kwargs["args"][0] for call in enqueue.call_args_list) == [e.pk for e in events]
