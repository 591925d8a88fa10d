"""Admin lists of inbound events, deliveries and discuss wakes; the reprocess action."""

import pytest
from django.test import TestCase

from amuxweb.feishu.models import InboundEvent
from tests.agents.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


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
