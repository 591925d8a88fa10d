"""Bad input on REST (issue 35): an unpaired surrogate (`"\\ud800"`, a JSON escape no UTF-8 text can carry) in any
REST input is a 400 with a sentence, never a 500. A choice field echoed it in its error and the JSON renderer
failed; the body parser now refuses it for every field of every endpoint (core.parsers)."""

import pytest

from agents.models import Turn
from core.parsers import SURROGATE_REFUSED
from tests.agents.factories import BotFactory, ThreadFactory, UserFactory
from tests.clients import token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def owned():
    owner = UserFactory(username="owner")
    bot = BotFactory(slug="planner", owner=owner)
    thread = ThreadFactory(bot=bot)
    turn = Turn.objects.create(bot=bot, thread=thread, trigger="rest", source_message_id="rest:1")
    client = token_client(owner)
    client.raise_request_exception = False  # a 500 is an answer to assert on, not an exception in the test
    return client, thread, turn


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/turns/{turn}/approvals/", '{"decision": "\\ud800"}'),  # a ChoiceField: the 500 on main
        ("/api/v1/turns/{turn}/approvals/", '{"decision": "deny", "approval_id": "\\udfff"}'),
        ("/api/v1/threads/", '{"bot": "planner", "runtime_mode": "\\ud800"}'),  # a ChoiceField: the 500 on main
        ("/api/v1/threads/", '{"bot": "planner", "runtime_mode": "chat", "title": "a\\ud800b"}'),
        ("/api/v1/threads/", '{"\\ud800": "planner"}'),  # in a key
        ("/api/v1/threads/{thread}/messages/", '{"content": ["\\ud800"]}'),
    ],
)
def test_u5_a_lone_surrogate_in_any_rest_body_is_a_400_with_a_sentence(owned, path, body):
    # given
    client, thread, turn = owned

    # when
    response = client.generic(
        "POST", path.format(turn=turn.pk, thread=thread.pk), body, content_type="application/json"
    )

    # then: a sentence, and nothing was made
    assert response.status_code == 400
    assert response.json() == {"message": SURROGATE_REFUSED, "extra": {}}
    assert Turn.objects.count() == 1 and not hasattr(turn, "decision")


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v1/threads/?bot=%ED%A0%80", 200),
        ("/api/v1/threads/{thread}/history/?cursor=%ED%A0%80&page_size=%ED%A0%80", 400),
        ("/api/v1/context/decisions/?root_msg_id=%ED%A0%80&profile=%ED%A0%80", 400),
        ("/api/v1/usage/?days=%ED%A0%80", 200),
    ],
)
def test_u5_a_surrogate_encoded_in_a_query_string_is_never_a_500(owned, path, status):
    # given
    client, thread, _turn = owned

    # when
    response = client.get(path.format(thread=thread.pk))

    # then: query strings are decoded with replacement (U+FFFD), which is refused or ignored like any other text
    assert response.status_code == status
    assert status == 200 or response.json()["message"] == "Validation error"
