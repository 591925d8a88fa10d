"""The threads REST API: permissions, the mask through the DB and both queries (V1-V4), bad input, schema."""

import logging

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agents.models import Message, Thread
from agents.selectors import context_messages_list, message_history_page, user_owns_bot_profile
from agents.services.threads import InvalidMessageKindError, InvalidRuntimeModeError, message_create, thread_create
from tests.agents.factories import BotFactory, MessageFactory, ThreadFactory, UserFactory, staff_user
from tests.clients import token_client

pytestmark = pytest.mark.django_db

THREADS_URL = "/api/v1/threads/"


@pytest.fixture
def people():
    owner = UserFactory(username="owner")
    return {
        "owner": owner,
        "other": UserFactory(username="other"),
        # U6: staff see every owner's threads through the model permissions, not through being staff
        "staff": staff_user(
            "staff",
            "agents.view_thread",
            "agents.view_bot",
            "agents.add_thread",
            "threadcontext.view_threadcontextdecision",
        ),
        "bare staff": staff_user("bare-staff"),
        "anonymous": None,
        "bot": BotFactory(slug="planner", owner=owner),
    }


# --- permission matrix -------------------------------------------------------------------------------------

THREAD_ENDPOINTS = ["{id}/", "{id}/history/", "{id}/context/"]


@pytest.mark.parametrize("endpoint", THREAD_ENDPOINTS)
@pytest.mark.parametrize(
    ("role", "expected_status"),
    [("owner", 200), ("staff", 200), ("other", 404), ("bare staff", 404), ("anonymous", 401)],
)
def test_thread_endpoints_permission_matrix(people, endpoint, role, expected_status):
    # given a chat thread of the owner's bot with one message
    thread = ThreadFactory(bot=people["bot"])
    message_create(thread=thread, kind="user_message", content="hello")
    client = token_client(people[role])

    # when
    response = client.get(THREADS_URL + endpoint.format(id=thread.pk))

    # then: another user cannot tell the thread exists; an anonymous caller is asked to authenticate
    assert response.status_code == expected_status
    if role == "anonymous":
        assert response["WWW-Authenticate"] == "Token"
        assert response.json() == {"message": "Authentication credentials were not provided.", "extra": {}}
    if role in ("other", "bare staff"):
        assert response.json()["message"] == "Thread not found."


def test_thread_endpoints_404_for_a_thread_that_does_not_exist(people):
    # given no thread 999999
    client = token_client(people["staff"])

    # when / then
    for endpoint in THREAD_ENDPOINTS:
        assert client.get(THREADS_URL + endpoint.format(id=999999)).status_code == 404
        assert client.get(THREADS_URL + endpoint.format(id=10**30)).status_code == 404


@pytest.mark.parametrize(
    ("role", "expected_titles"),
    [("owner", ["mine"]), ("staff", ["theirs", "mine"]), ("other", ["theirs"]), ("bare staff", [])],
)
def test_thread_list_permission_matrix(people, role, expected_titles):
    # given one thread of the owner's bot and one of the other user's bot
    ThreadFactory(bot=people["bot"], title="mine")
    ThreadFactory(bot=BotFactory(owner=people["other"]), title="theirs")

    # when
    response = token_client(people[role]).get(THREADS_URL)

    # then: newest first, only the threads of bots the user owns (staff who may view threads: all)
    assert response.status_code == 200
    assert [thread["title"] for thread in response.json()["results"]] == expected_titles
    assert response.json()["count"] == len(expected_titles)


def test_thread_list_runs_no_query_per_thread(people):
    # given one thread, then eight more on several bots
    client = token_client(people["owner"])
    ThreadFactory(bot=people["bot"])
    with CaptureQueriesContext(connection) as one_thread:
        assert client.get(THREADS_URL).status_code == 200
    for _ in range(4):
        ThreadFactory(bot=people["bot"])
        ThreadFactory(bot=BotFactory(owner=people["owner"]))

    # when
    with CaptureQueriesContext(connection) as nine_threads:
        response = client.get(THREADS_URL)

    # then: the bot's slug comes with the page (select_related), not one query per row
    assert response.json()["count"] == 9
    assert len(nine_threads) == len(one_thread)


def test_thread_list_anonymous_is_401(people):
    response = token_client(None).get(THREADS_URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize(
    ("role", "expected_status"),
    [("owner", 201), ("staff", 201), ("other", 400), ("bare staff", 400), ("anonymous", 401)],
)
def test_thread_create_permission_matrix(people, role, expected_status):
    # given the owner's bot "planner"
    client = token_client(people[role])

    # when
    response = client.post(THREADS_URL, {"bot": "planner", "runtime_mode": "chat", "title": "t"}, format="json")

    # then: only the owner (or staff who may add threads) may start a thread on it; another's attempt writes nothing
    assert response.status_code == expected_status
    assert Thread.objects.count() == (1 if expected_status == 201 else 0)


def test_session_authentication_works_too(people):
    # given a logged-in session (no token)
    thread = ThreadFactory(bot=people["bot"])
    client = APIClient()
    client.force_login(people["owner"])

    # when
    response = client.get(f"{THREADS_URL}{thread.pk}/")

    # then
    assert response.status_code == 200
    assert response.json()["id"] == thread.pk


@pytest.mark.parametrize(
    ("role", "bot_profile", "expected"),
    [
        ("owner", "planner", True),
        ("owner", "coder", False),
        ("owner", "missing", False),
        ("other", "planner", False),
        ("other", "coder", True),
        # the staff part of the rule is threadcontext's (core.permissions), not ownership
        ("staff", "planner", False),
    ],
)
def test_user_owns_bot_profile_is_the_ownership_rule_for_context_decisions(people, role, bot_profile, expected):
    # given "planner" owned by owner and "coder" by other
    BotFactory(slug="coder", owner=people["other"])

    assert user_owns_bot_profile(people[role], bot_profile) is expected


@pytest.mark.parametrize(
    ("role", "expected_status"), [("owner", 200), ("other", 403), ("staff", 200), ("bare staff", 403)]
)
def test_context_decisions_api_lets_a_bots_owner_read_by_default(people, role, expected_status):
    # given the default settings: AMUX_CONTEXT_DECISION_ACCESS_CHECK is the ownership rule (ARCHITECTURE §7)

    # when
    response = token_client(people[role]).get("/api/v1/context/decisions/?profile=planner")

    # then: the owner reads their bot's decisions (none yet), another user is refused
    assert response.status_code == expected_status
    if expected_status == 200:
        assert response.json() == []


def test_user_owns_bot_profile_is_false_for_anonymous(people):
    from django.contrib.auth.models import AnonymousUser

    assert user_owns_bot_profile(AnonymousUser(), "planner") is False


# --- create ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime_mode", ["chat", "automation"])
def test_thread_create_returns_the_thread_with_channel_rest(people, runtime_mode):
    # given
    client = token_client(people["owner"])

    # when
    response = client.post(
        THREADS_URL, {"bot": "planner", "runtime_mode": runtime_mode, "title": "Plan the week"}, format="json"
    )

    # then
    assert response.status_code == 201
    thread = Thread.objects.get()
    assert response.json() == {
        "id": thread.pk,
        "bot": "planner",
        "runtime_mode": runtime_mode,
        "channel": "rest",
        "title": "Plan the week",
        "external_key": "",
        "retired_at": None,
        "created_at": response.json()["created_at"],
    }
    assert (thread.bot_id, thread.runtime_mode, thread.channel) == (people["bot"].pk, runtime_mode, "rest")


def test_v4_runtime_mode_cannot_be_changed_through_the_api(people):
    # given a chat thread
    thread = ThreadFactory(bot=people["bot"], runtime_mode="chat")
    client = token_client(people["owner"])

    # when a client tries to change it
    put = client.put(f"{THREADS_URL}{thread.pk}/", {"runtime_mode": "automation"}, format="json")
    patch = client.patch(f"{THREADS_URL}{thread.pk}/", {"runtime_mode": "automation"}, format="json")

    # then: there is no write endpoint for a thread, and the mode stays
    assert (put.status_code, patch.status_code) == (405, 405)
    thread.refresh_from_db()
    assert thread.runtime_mode == "chat"


# --- bad input: 4xx with a clear message, nothing written --------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected_message", "expected_field"),
    [
        ({"bot": "planner", "runtime_mode": "memory"}, "Validation error", "runtime_mode"),
        ({"bot": "planner"}, "Validation error", "runtime_mode"),
        ({"runtime_mode": "chat"}, "Validation error", "bot"),
        ({"bot": "planner", "runtime_mode": "chat", "title": "x" * 201}, "Validation error", "title"),
        ({"bot": "no such bot!", "runtime_mode": "chat"}, "Validation error", "bot"),
        ({"bot": "nobody", "runtime_mode": "chat"}, "No bot 'nobody' that you own.", None),
        ({"bot": "coder", "runtime_mode": "chat"}, "No bot 'coder' that you own.", None),
    ],
)
def test_thread_create_bad_input_is_400_and_writes_nothing(people, body, expected_message, expected_field):
    # given a bot "coder" owned by someone else
    BotFactory(slug="coder", owner=people["other"])
    client = token_client(people["owner"])

    # when
    response = client.post(THREADS_URL, body, format="json")

    # then
    assert response.status_code == 400
    assert response.json()["message"] == expected_message
    if expected_field:
        assert list(response.json()["extra"]["fields"]) == [expected_field]
    assert Thread.objects.count() == 0


@pytest.mark.parametrize("path", ["/api/v1/threads/abc/", "/api/v1/threads/1/nothing/", "/api/v2/threads/"])
def test_an_unknown_api_url_is_a_404_json_body(people, path):
    # when a client asks for a URL no API view matches
    response = token_client(people["owner"]).get(path)

    # then it gets the API's JSON error body, not an HTML page
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"message": "Not found.", "extra": {}}


def test_an_unknown_url_outside_the_api_is_still_djangos_page(people):
    response = token_client(people["owner"]).get("/nothing-here/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_thread_create_malformed_json_is_400_and_writes_nothing(people):
    response = token_client(people["owner"]).post(THREADS_URL, "{not json", content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {"message": "The body is not valid JSON.", "extra": {}}  # words, not the decoder's
    assert Thread.objects.count() == 0


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", '{"bot": "planner", "runtime_mode": "chat", "title": "' + "x" * 2000 + '"}'),
        ("application/x-www-form-urlencoded", "bot=planner&runtime_mode=chat&title=" + "x" * 2000),
    ],
)
def test_thread_create_oversized_body_is_413_json_and_writes_nothing(people, settings, content_type, body):
    # given a body over DATA_UPLOAD_MAX_MEMORY_SIZE
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    # when
    response = token_client(people["owner"]).post(THREADS_URL, body, content_type=content_type)

    # then
    assert response.status_code == 413
    assert response.json() == {"message": "Request body too large.", "extra": {"max_bytes": 1000}}
    assert Thread.objects.count() == 0


def test_service_refuses_an_unknown_runtime_mode_and_writes_nothing(people):
    with pytest.raises(InvalidRuntimeModeError, match="memory") as error:
        thread_create(bot=people["bot"], runtime_mode="memory", channel="rest")

    assert error.value.status_code == 400
    assert Thread.objects.count() == 0


@pytest.mark.parametrize(
    ("query", "expected_message"),
    [
        ("cursor=garbage", "Malformed cursor."),
        ("cursor=eyJiZWZvcmUiOiAiMSJ9", "Malformed cursor."),
        ("cursor=eyJiZWZvcmUiOiAtNX0", "Malformed cursor."),
        ("cursor=bnVsbA", "Malformed cursor."),
        ("cursor=eyJiZWZvcmUiOiA5MjIzMzcyMDM2ODU0Nzc1ODA4fQ", "Malformed cursor."),
        ("cursor=%00", "Validation error"),
        ("cursor=" + "x" * 201, "Validation error"),
    ],
)
def test_history_malformed_cursor_is_400(people, query, expected_message):
    # given (the cursors are: not base64 JSON, {"before": "1"}, {"before": -5}, null, {"before": 2**63}, a NUL byte,
    # longer than any cursor we hand out)
    thread = ThreadFactory(bot=people["bot"])

    # when
    response = token_client(people["owner"]).get(f"{THREADS_URL}{thread.pk}/history/?{query}")

    # then
    assert response.status_code == 400
    assert response.json()["message"] == expected_message
    if expected_message == "Validation error":
        assert list(response.json()["extra"]["fields"]) == ["cursor"]


@pytest.mark.parametrize("page_size", ["0", "201", "-1", "abc", "1.5"])
def test_history_page_size_out_of_range_is_400(people, page_size):
    thread = ThreadFactory(bot=people["bot"])

    response = token_client(people["owner"]).get(f"{THREADS_URL}{thread.pk}/history/?page_size={page_size}")

    assert response.status_code == 400
    assert list(response.json()["extra"]["fields"]) == ["page_size"]


# --- the mask through the DB, /history and /context (V1-V4) ------------------------------------------------


def _thread_with_every_kind(*, bot, runtime_mode: str) -> tuple[Thread, list[Message]]:
    thread = thread_create(bot=bot, runtime_mode=runtime_mode, channel="rest")
    messages = [
        message_create(thread=thread, kind=kind, content=f"{runtime_mode} {kind} {n}")
        for n in range(2)
        for kind in ("user_message", "agent_reply")
    ]
    return thread, messages


def test_v2_masks_stored_in_the_db_follow_the_matrix(people):
    # given a chat and an automation thread with every kind, created through the service
    _thread_with_every_kind(bot=people["bot"], runtime_mode="chat")
    _thread_with_every_kind(bot=people["bot"], runtime_mode="automation")

    # when
    stored = sorted(set(Message.objects.values_list("thread__runtime_mode", "kind", "visibility_mask")))

    # then
    assert stored == [
        ("automation", "agent_reply", 1),
        ("automation", "user_message", 0),
        ("chat", "agent_reply", 3),
        ("chat", "user_message", 3),
    ]


def test_message_create_refuses_an_unknown_kind_and_writes_nothing(people):
    # given a chat thread
    thread = thread_create(bot=people["bot"], runtime_mode="chat", channel="rest")

    # when / then
    with pytest.raises(InvalidMessageKindError, match="^Unknown message kind 'system'.$") as error:
        message_create(thread=thread, kind="system", content="x")
    assert (error.value.status_code, error.value.extra) == (
        400,
        {"kind": "system", "allowed": list(Message.Kind.values)},
    )
    assert Message.objects.count() == 0


def test_v4_message_create_takes_no_mask():
    with pytest.raises(TypeError):
        message_create(thread=ThreadFactory(), kind="user_message", content="x", visibility_mask=2)


def test_v3_chat_history_and_context_both_show_every_message(people):
    # given
    thread, messages = _thread_with_every_kind(bot=people["bot"], runtime_mode="chat")
    client = token_client(people["owner"])

    # when
    history = client.get(f"{THREADS_URL}{thread.pk}/history/").json()
    context = client.get(f"{THREADS_URL}{thread.pk}/context/").json()

    # then: history newest first, context oldest first
    assert [m["id"] for m in history["results"]] == [m.pk for m in reversed(messages)]
    assert history["next"] is None
    assert [m["id"] for m in context["results"]] == [m.pk for m in messages]
    assert context["thread"] == thread.pk
    assert history["results"][0] == {
        "id": messages[-1].pk,
        "kind": "agent_reply",
        "content": "chat agent_reply 1",
        "author": "",
        "created_at": history["results"][0]["created_at"],
        "visibility_mask": 3,
    }


def test_v3_automation_history_shows_only_replies_and_context_is_empty(people):
    # given an automation thread: prompts have mask 0, replies mask 1
    thread, messages = _thread_with_every_kind(bot=people["bot"], runtime_mode="automation")
    client = token_client(people["owner"])

    # when
    history = client.get(f"{THREADS_URL}{thread.pk}/history/").json()
    context = client.get(f"{THREADS_URL}{thread.pk}/context/").json()

    # then: an automation thread's messages never appear in context
    replies = [m.pk for m in messages if m.kind == "agent_reply"]
    assert [m["id"] for m in history["results"]] == list(reversed(replies))
    assert context["results"] == []
    assert context_messages_list(thread=thread) == []


@pytest.mark.parametrize("mask", [0, 1, 2, 3])
def test_v3_selectors_filter_exactly_on_each_bit(mask):
    # given one thread holding one message of each possible mask (written directly: the selectors must not
    # rely on the matrix, only on the bits)
    thread = ThreadFactory()
    by_mask = {m: MessageFactory(thread=thread, visibility_mask=m) for m in (0, 1, 2, 3)}

    # when
    history_ids = [m.pk for m in message_history_page(thread=thread).messages]
    context_ids = [m.pk for m in context_messages_list(thread=thread)]

    # then
    assert (by_mask[mask].pk in history_ids) == bool(mask & 1)
    assert (by_mask[mask].pk in context_ids) == bool(mask & 2)


def test_context_messages_list_includes_the_prompt_and_only_this_thread(people):
    # given two chat threads
    thread = thread_create(bot=people["bot"], runtime_mode="chat", channel="rest")
    mine = message_create(thread=thread, kind="user_message", content="raw", prompt="rendered")
    message_create(thread=ThreadFactory(bot=people["bot"]), kind="user_message", content="elsewhere")

    # when
    context = token_client(people["owner"]).get(f"{THREADS_URL}{thread.pk}/context/").json()

    # then
    assert [(m["id"], m["content"], m["prompt"]) for m in context["results"]] == [(mine.pk, "raw", "rendered")]


def test_v3_t3_context_is_what_a_turn_assembles_the_newest_that_fit_the_model_window(people):
    # given a model with a 100-token window: after the answer's reserve (min(4096, 100 // 4) = 25) 75 tokens are
    # left for context, and each 40-char message costs 40 / 4 + 4 = 14 tokens, so the newest 5 fit (70 tokens)
    model = people["bot"].primary_model
    model.context_window = 100
    model.save()
    thread = thread_create(bot=people["bot"], runtime_mode="chat", channel="rest")
    ids = [
        message_create(thread=thread, kind=kind, content=f"{n}".ljust(40, "x")).pk
        for n, kind in enumerate(["user_message", "agent_reply"] * 4)
    ]
    client = token_client(people["owner"])

    # when
    context = client.get(f"{THREADS_URL}{thread.pk}/context/").json()
    history = client.get(f"{THREADS_URL}{thread.pk}/history/").json()

    # then: context is the newest 5, oldest first; history still shows all 8
    assert [m["id"] for m in context["results"]] == ids[3:]
    assert [m["id"] for m in history["results"]] == list(reversed(ids))


def test_v3_context_costs_the_same_queries_however_long_the_thread(people):
    # given a chat thread with 6 messages, then one with 300 (a 1000-token window holds at most 250 messages)
    model = people["bot"].primary_model
    model.context_window = 1000
    model.save()
    client = token_client(people["owner"])

    def context_queries(count: int) -> tuple[int, int]:
        thread = thread_create(bot=people["bot"], runtime_mode="chat", channel="rest")
        Message.objects.bulk_create(
            [Message(thread=thread, kind="user_message", visibility_mask=3, content="m") for _ in range(count)]
        )
        with CaptureQueriesContext(connection) as queries:
            response = client.get(f"{THREADS_URL}{thread.pk}/context/")
        return len(queries), len(response.json()["results"])

    # when
    short_queries, short_count = context_queries(6)
    long_queries, long_count = context_queries(300)

    # then: the long thread is cut to what fits (budget 1000 - 250 = 750 tokens, 5 tokens a message) in as many queries
    assert (short_count, long_count) == (6, 150)
    assert short_queries == long_queries


# --- OpenAPI -----------------------------------------------------------------------------------------------


def test_openapi_schema_generates_with_no_warnings(tmp_path):
    # when / then: --fail-on-warn raises on any warning or error
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    schema = (tmp_path / "schema.yaml").read_text()
    for path in ("/api/v1/threads/", "/api/v1/threads/{thread_id}/history/", "/api/v1/threads/{thread_id}/context/"):
        assert f"  {path}:" in schema


def test_schema_and_swagger_are_served(people):
    client = token_client(people["owner"])

    schema = client.get("/api/schema/")
    docs = client.get("/api/docs/")

    assert schema.status_code == 200
    assert b"/api/v1/threads/{thread_id}/history/" in schema.content
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()


def test_v3_context_messages_list_trims_to_the_newest_before_an_id_oldest_first():
    # given a chat thread of 6 messages
    thread = ThreadFactory(runtime_mode="chat")
    ids = [message_create(thread=thread, kind=kind, content="m").pk for kind in ["user_message", "agent_reply"] * 3]

    # when / then
    assert [m.pk for m in context_messages_list(thread=thread, limit=3)] == ids[3:]
    assert [m.pk for m in context_messages_list(thread=thread, before_id=ids[5])] == ids[:5]
    assert [m.pk for m in context_messages_list(thread=thread, before_id=ids[5], limit=2)] == ids[3:5]
    assert context_messages_list(thread=thread, limit=0) == []


# --- issue 10: bounded JSON depth, worded errors, limit/offset refused as the schema refuses them ------------


@pytest.mark.parametrize(
    "body",
    ["[" * 1000 + "]" * 1000, '{"a":' * 1000 + "1" + "}" * 1000],
    ids=["arrays", "objects"],
)
def test_i10_1_a_depth_bomb_post_is_a_400_writes_nothing_and_logs_no_error(people, caplog, body):
    # when
    response = token_client(people["owner"]).post(THREADS_URL, body, content_type="application/json")
    # then
    assert response.status_code == 400
    assert response.json() == {"message": "The JSON body is nested deeper than 64 levels.", "extra": {}}
    assert Thread.objects.count() == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_i10_1_a_body_nested_50_deep_is_parsed_and_answered_by_the_serializer(people):
    # given: valid fields plus an extra key nested 50 deep (the serializer ignores unknown keys)
    body = '{"bot": "planner", "runtime_mode": "chat", "extra": ' + "[" * 50 + "]" * 50 + "}"
    # when
    response = token_client(people["owner"]).post(THREADS_URL, body, content_type="application/json")
    # then
    assert response.status_code == 201
    assert Thread.objects.count() == 1


def test_i10_6_a_broken_multipart_body_is_a_worded_400(people):
    # when: a multipart body with no boundary (Django's parser error text used to be the message)
    response = token_client(people["owner"]).post(THREADS_URL, b"--x\r\nbad", content_type="multipart/form-data")
    # then
    assert response.status_code == 400
    assert response.json() == {
        "message": "The body is not valid multipart/form-data (check its boundary and parts).",
        "extra": {},
    }
    assert Thread.objects.count() == 0


@pytest.mark.parametrize(
    ("query", "field", "expected"),
    [
        ("limit=abc", "limit", "limit must be a whole number from 1 to 200."),
        ("limit=0", "limit", "limit must be a whole number from 1 to 200."),
        ("limit=201", "limit", "limit must be a whole number from 1 to 200."),
        ("limit=1.5", "limit", "limit must be a whole number from 1 to 200."),
        ("offset=-1", "offset", "offset must be a whole number at least 0."),
        ("offset=x", "offset", "offset must be a whole number at least 0."),
    ],
)
def test_i10_7_garbage_limit_or_offset_is_a_400_not_a_silent_default(people, query, field, expected):
    # when
    response = token_client(people["owner"]).get(f"{THREADS_URL}?{query}")
    # then
    assert response.status_code == 400
    assert response.json() == {"message": "Validation error", "extra": {"fields": {field: [expected]}}}


def test_i10_7_limit_and_offset_within_bounds_page_the_list(people):
    # given
    ThreadFactory.create_batch(3, bot=people["bot"])
    # when
    body = token_client(people["owner"]).get(f"{THREADS_URL}?limit=2&offset=2").json()
    # then
    assert (body["count"], len(body["results"])) == (3, 1)


def test_i10_7_the_schema_states_the_bounds_the_api_enforces():
    # given
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)

    # when
    def parameter(path: str, name: str) -> dict:
        return next(p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == name)["schema"]

    content = schema["components"]["schemas"]["MessagePostInput"]["properties"]["content"]
    # then
    assert parameter("/api/v1/threads/", "limit") == {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}
    assert parameter("/api/v1/threads/", "offset") == {"type": "integer", "minimum": 0, "default": 0}
    history_page_size = parameter("/api/v1/threads/{thread_id}/history/", "page_size")
    assert (history_page_size["minimum"], history_page_size["maximum"]) == (1, 200)
    assert parameter("/api/v1/context/decisions/", "profile")["oneOf"][0]["pattern"] == "^[-a-zA-Z0-9_]*$"
    assert (content["pattern"], content["maxLength"]) == ("\\S", 32000)  # not blank: one non-space character
    assert set(schema["paths"]["/api/v1/threads/{thread_id}/messages/"]["post"]["responses"]) >= {"409", "414"}


def test_an_unknown_api_url_is_json_404_with_debug_on(client, settings):
    settings.DEBUG = True  # Django's handler404 answers only with DEBUG off; the /api/ catch-all answers always

    response = client.get("/api/v1/no-such-thing/")

    assert response.status_code == 404
    assert response.json() == {"message": "Not found.", "extra": {}}
