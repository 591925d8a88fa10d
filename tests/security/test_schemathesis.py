"""Issue 10: schemathesis against the live OpenAPI schema, as staff, as a user who owns nothing, and as anonymous.

Every operation of /api/schema/ is called with generated (valid and invalid) data through the real WSGI app.
Asserted on every response: no 5xx, it conforms to the schema (status code, content type, body; schemathesis's
checks, negative_data_rejection included: what the schema refuses the API refuses), the non-owner never sees
an object of the owner's, and a refused request (4xx) wrote no row. Figures are printed per role.

positive_data_acceptance is left out on purpose: schema-valid data may name an object that does not exist or
is not the caller's (`{"bot": "0"}` -> 400 "No bot '0' that you own."), which no schema can express.
"""

import json

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.specs.openapi.checks import positive_data_acceptance

from agents.models import Message, Provider, Thread, Turn
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory, UserFactory, staff_user

pytestmark = pytest.mark.django_db

schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())

EXAMPLES_PER_OPERATION = 6  # ~600 requests in all: about three minutes on one core
FIGURES: dict[str, dict[str, int]] = {}


@pytest.fixture(autouse=True)
def _test_connection_kept_across_requests():
    """The real WSGI app closes the database connection at the end of each request (close_old_connections), which
    on PostgreSQL closes the test's own transaction under it. Django's test client disconnects the same two
    receivers for the same reason; this does it for the WSGI transport schemathesis drives."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def world():
    """The owner's bot with threads (ids 1.. are the ones schemathesis draws most), staff, and a stranger."""
    owner = UserFactory(username="owner")
    model = LLMModelFactory(provider=ProviderFactory(kind=Provider.Kind.LOCAL_RULES), name="rules")
    bot = BotFactory(slug="planner", owner=owner, primary_model=model)
    owned = [ThreadFactory(bot=bot, title=f"owned-{n}") for n in range(3)]
    return {
        "owner": owner,
        # U6: staff reach every owner's rows through the model permissions of each REST action
        "staff": staff_user(
            "staff",
            "agents.view_bot",
            "agents.view_thread",
            "agents.add_thread",
            "agents.add_message",
            "agents.view_turn",
            "agents.change_toolapproval",
            "threadcontext.view_threadcontextdecision",
        ),
        "other": UserFactory(username="other"),
        "owned_thread_ids": {thread.pk for thread in owned},
    }


def row_counts() -> tuple[int, int, int]:
    return Thread.objects.count(), Message.objects.count(), Turn.objects.count()


def ids_in(body) -> set[int]:
    """Every "id"/"thread" value anywhere in a JSON body."""
    found, stack = set(), [body]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("id", "thread") and isinstance(item, int):
                    found.add(item)
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    return found


def run_case(case, world, role: str) -> None:
    headers = {}
    if role != "anonymous":
        headers["Authorization"] = f"Token {Token.objects.get_or_create(user=world[role])[0].key}"
    figures = FIGURES.setdefault(role, {"requests": 0, "5xx": 0, "foreign_objects": 0, "rows_from_rejected": 0})
    before = row_counts()
    response = case.call(headers=headers)
    figures["requests"] += 1
    figures["5xx"] += response.status_code >= 500
    if response.status_code >= 400:
        figures["rows_from_rejected"] += row_counts() != before
        assert row_counts() == before, "a refused request wrote a row"
    if role == "other" and response.status_code < 300 and response.content:
        foreign = ids_in(json.loads(response.content)) & world["owned_thread_ids"]
        figures["foreign_objects"] += len(foreign)
        assert not foreign, "a user who owns nothing saw the owner's thread"
    case.validate_response(response, headers=headers, excluded_checks=[positive_data_acceptance])


SUITE_SETTINGS = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@schema.parametrize()
@SUITE_SETTINGS
def test_schemathesis_as_staff(case, world):
    run_case(case, world, "staff")


@schema.parametrize()
@SUITE_SETTINGS
def test_schemathesis_as_a_user_who_owns_nothing(case, world):
    run_case(case, world, "other")


@schema.parametrize()
@SUITE_SETTINGS
def test_schemathesis_as_anonymous(case, world):
    run_case(case, world, "anonymous")


def test_schemathesis_figures():
    """Runs after the three above (file order): prints their totals, and fails if any went unreported."""
    for role, figures in sorted(FIGURES.items()):
        print(f"\n[schemathesis: {role}] " + " ".join(f"{key}={value}" for key, value in figures.items()))
    assert all(
        figures["5xx"] == figures["foreign_objects"] == figures["rows_from_rejected"] == 0
        for figures in FIGURES.values()
    )
