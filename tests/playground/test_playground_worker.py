"""The playground through a real Celery worker (REDIS_URL + PostgreSQL): the page's post endpoint hands signed
events to the intake, a separate worker process routes, debounces, judges and answers, and the state endpoint
shows it; the worker's Feishu domain is the real one, and still nothing of the playground is sent."""

import json

import pytest
from django.urls import reverse

from agents.models import Bot
from console.models import PlaygroundGroup, PlaygroundMember
from console.playground.services import playground_members_sync
from feishu.models import OutboundDelivery
from tests.agents.factories import LLMModelFactory
from tests.helpers import wait_for

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def wait_for_state(client, group, predicate, *, worker, what: str, timeout: float = 60.0) -> dict:
    """The playground's state once `predicate` holds for it (read through the page's own state URL)."""

    def state_if_reached() -> dict | None:
        state = client.get(reverse("admin:playground_state", args=[group.pk])).json()
        return state if predicate(state) else None

    return wait_for(state_if_reached, worker=worker, what=what, timeout=timeout, interval=0.2)


def test_a_real_worker_answers_the_mention_and_judges_the_chatter(celery_worker, admin_client, make_feishu_bot):
    # given: a discuss bot with a real-looking Feishu app and a short debounce, and a mention-only bot
    judge = LLMModelFactory(name="local-judge", supports_tool_calls=True)
    planner = make_feishu_bot(
        slug="planner",
        name="Planner",
        discuss_probe_mode=Bot.ProbeMode.MODEL,
        discuss_probe_model=judge,
        probe_debounce_initial_ms=300,
        probe_debounce_max_ms=2000,
    )
    coder = make_feishu_bot(slug="coder", name="Coder", feishu_app_secret="")
    group = PlaygroundGroup.objects.create(name="Worker", kind=PlaygroundGroup.Kind.GROUP)
    PlaygroundMember.objects.create(group=group, bot=planner, reply_mode=PlaygroundMember.ReplyMode.DISCUSS)
    PlaygroundMember.objects.create(group=group, bot=coder, reply_mode=PlaygroundMember.ReplyMode.MENTION)
    playground_members_sync(group=group)
    url = reverse("admin:playground_post", args=[group.pk])

    # when
    for body in ({"sender": "Alice", "text": "ship it", "mentions": [coder.pk]}, {"sender": "Bob", "text": "ok"}):
        response = admin_client.post(url, data=json.dumps(body), content_type="application/json")
        assert response.status_code == 201

    # then
    def settled(state: dict) -> bool:
        first, second = (state["messages"] + [None, None])[:2]
        return (
            second is not None
            and (first["results"][1]["turn"] or {}).get("is_finished", False)
            and (second["results"][0]["gate"] or {}).get("decision") in ("speak", "silent")
        )

    state = wait_for_state(admin_client, group, settled, worker=celery_worker, what="the reply and the judgement")
    first, second = state["messages"]
    assert first["results"][1]["turn"]["reply"].endswith("you said: ship it")
    assert second["results"][0]["gate"]["decision"] == "silent"
    assert set(OutboundDelivery.objects.values_list("status", flat=True)) == {"recorded"}
