"""Keyset pagination of /history (V5): stable, no duplicates or gaps while messages arrive, deep = first cost."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.selectors import context_messages_list, history_cursor_decode, history_cursor_encode, message_history_page
from agents.services.threads import message_create, thread_create
from tests.agents.factories import BotFactory, MessageFactory, ThreadFactory

pytestmark = pytest.mark.django_db


def _owner_client(thread) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=thread.bot.owner)[0].key}")
    return client


def _walk(client: APIClient, url: str, *, between_pages=None) -> list[list[int]]:
    pages = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        pages.append([message["id"] for message in response.json()["results"]])
        url = response.json()["next"]
        if between_pages and url:
            between_pages(len(pages))
    return pages


@pytest.mark.parametrize("page_size", [1, 3, 7, 50])
def test_v5_pages_are_newest_first_with_no_duplicates_or_gaps_while_messages_arrive(page_size):
    # given an automation thread (history = the replies only) with 20 prompts and 20 replies
    thread = thread_create(bot=BotFactory(), runtime_mode="automation", channel="automation")
    replies = []
    for n in range(20):
        message_create(thread=thread, kind="user_message", content=f"prompt {n}")
        replies.append(message_create(thread=thread, kind="agent_reply", content=f"reply {n}").pk)
    arrived = []

    def new_messages_arrive(page_number: int) -> None:
        message_create(thread=thread, kind="user_message", content=f"late prompt {page_number}")
        arrived.append(message_create(thread=thread, kind="agent_reply", content=f"late reply {page_number}").pk)

    # when a client walks every page while new messages arrive between page fetches
    pages = _walk(
        _owner_client(thread),
        f"/api/v1/threads/{thread.pk}/history/?page_size={page_size}",
        between_pages=new_messages_arrive,
    )

    # then the walk is exactly the messages that existed at the first fetch, newest first, each once
    walked = [message_id for page in pages for message_id in page]
    assert walked == list(reversed(replies))
    assert [len(page) for page in pages[:-1]] == [page_size] * (len(pages) - 1)
    assert 1 <= len(pages[-1]) <= page_size
    assert len(arrived) == len(pages) - 1
    # and the late messages are on a fresh first page
    fresh = _walk(_owner_client(thread), f"/api/v1/threads/{thread.pk}/history/?page_size=200")
    assert fresh == [list(reversed(arrived)) + list(reversed(replies))]


def test_history_default_page_size_is_50_and_next_link_keeps_page_size():
    # given a chat thread with 51 messages
    thread = ThreadFactory()
    ids = [MessageFactory(thread=thread).pk for _ in range(51)]
    client = _owner_client(thread)

    # when
    first = client.get(f"/api/v1/threads/{thread.pk}/history/").json()
    second = client.get(first["next"]).json()

    # then
    assert [m["id"] for m in first["results"]] == list(reversed(ids[1:]))
    assert first["next"].startswith(f"http://testserver/api/v1/threads/{thread.pk}/history/?cursor=")
    assert [m["id"] for m in second["results"]] == [ids[0]]
    assert second["next"] is None
    with_size = client.get(f"/api/v1/threads/{thread.pk}/history/?page_size=10").json()
    assert "page_size=10" in with_size["next"]


def test_empty_thread_has_one_empty_page():
    thread = ThreadFactory()

    page = _owner_client(thread).get(f"/api/v1/threads/{thread.pk}/history/").json()

    assert page == {"results": [], "next": None}


def test_a_cursor_from_another_thread_only_bounds_by_id():
    # given two threads; a cursor is an id bound, never a way into another thread
    thread, other = ThreadFactory(), ThreadFactory()
    mine = [MessageFactory(thread=thread).pk for _ in range(3)]
    MessageFactory(thread=other)
    cursor = history_cursor_encode(before_id=10**9)

    # when
    page = message_history_page(thread=thread, cursor=cursor)

    # then
    assert [m.pk for m in page.messages] == list(reversed(mine))


def test_cursor_round_trips_and_is_opaque_text():
    cursor = history_cursor_encode(before_id=900_001)

    assert history_cursor_decode(cursor=cursor) == 900_001
    assert cursor.isascii() and "900001" not in cursor


def test_v5_a_deep_page_runs_the_same_single_query_as_the_first_no_offset():
    # given 30 history messages
    thread = ThreadFactory()
    for _ in range(30):
        MessageFactory(thread=thread)
    first = message_history_page(thread=thread, page_size=2)
    deep_cursor = history_cursor_encode(before_id=message_history_page(thread=thread, page_size=27).messages[-1].pk)

    # when
    with CaptureQueriesContext(connection) as first_queries:
        message_history_page(thread=thread, page_size=2)
    with CaptureQueriesContext(connection) as deep_queries:
        deep = message_history_page(thread=thread, cursor=deep_cursor, page_size=2)

    # then: one query each, a LIMIT and no OFFSET; the deep page only adds the id bound
    assert len(first.messages) == len(deep.messages) == 2
    assert len(first_queries) == len(deep_queries) == 1
    first_sql, deep_sql = first_queries[0]["sql"].upper(), deep_queries[0]["sql"].upper()
    assert "OFFSET" not in first_sql and "OFFSET" not in deep_sql
    assert "LIMIT 3" in first_sql and "LIMIT 3" in deep_sql
    assert '"ID" <' in deep_sql.replace('"AGENTS_MESSAGE".', "")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    runtime_mode=st.sampled_from(["chat", "automation"]),
    kinds=st.lists(st.sampled_from(["user_message", "agent_reply"]), max_size=30),
    page_size=st.integers(min_value=1, max_value=8),
    arrivals=st.lists(st.sampled_from(["user_message", "agent_reply"]), max_size=5),
)
def test_v3_v5_any_thread_walks_to_exactly_its_history_and_context_is_exactly_mask_2(
    runtime_mode, kinds, page_size, arrivals
):
    """Property: for any mix of kinds, the keyset walk (with arrivals between pages) equals the mask & 1 subset at
    the first fetch, newest first, each once; context equals the mask & 2 subset, oldest first."""
    # given
    thread = thread_create(bot=BotFactory(), runtime_mode=runtime_mode, channel="rest")
    messages = [message_create(thread=thread, kind=kind, content=kind) for kind in kinds]
    pending = list(arrivals)

    # when
    walked, cursor = [], None
    while True:
        page = message_history_page(thread=thread, cursor=cursor, page_size=page_size)
        walked.extend(message.pk for message in page.messages)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
        if pending:
            message_create(thread=thread, kind=pending.pop(), content="late")

    # then
    assert walked == [m.pk for m in reversed(messages) if m.visibility_mask & 1]
    expected_context = [m.pk for m in messages if m.visibility_mask & 2]
    assert [m.pk for m in context_messages_list(thread=thread)][: len(expected_context)] == expected_context
    if runtime_mode == "automation":
        assert context_messages_list(thread=thread) == []
