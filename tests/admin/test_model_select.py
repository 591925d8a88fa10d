"""The bot form's two model selects mark a model whose provider failed its last connection test (issue 14)."""

import json

import pytest

from tests.agents.factories import BotFactory, LLMModelFactory
from tests.agents.test_turns_admin import stub_model
from tests.stubs.llm_servers import AUTH_BODIES, StubResponse

pytestmark = pytest.mark.django_db
MARK = "its provider failed its last test"


@pytest.fixture
def failed_model(admin_client, llm_stub):
    """A judge whose provider's key the stub refused when the operator pressed "Test connection"."""
    model = stub_model(llm_stub)
    model.supports_tool_calls = True  # a judge must call tools to be offered as one
    model.save()
    llm_stub.enqueue("openai_chat", StubResponse(status=401, body=AUTH_BODIES["openai_chat"]))
    admin_client.post(
        "/admin/agents/provider/", {"action": "test_connection", "_selected_action": [model.provider_id], "index": 0}
    )
    return model


@pytest.mark.parametrize("field_name", ["discuss_probe_model", "primary_model"])
def test_the_model_search_marks_a_model_whose_provider_failed_its_last_test(admin_client, failed_model, field_name):
    # given a healthy model beside it
    healthy = LLMModelFactory(name="healthy-judge", supports_tool_calls=True)
    bot = BotFactory()

    # when the select asks for its options (the URL the rendered widget carries)
    page = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").content.decode()
    url = "/admin/agents/llmmodel/marked-autocomplete/"
    assert f'data-ajax--url="{url}"' in page
    response = admin_client.get(url, {"app_label": "agents", "model_name": "bot", "field_name": field_name})

    # then
    texts = {item["id"]: item["text"] for item in json.loads(response.content)["results"]}
    assert MARK in texts[str(failed_model.pk)]
    assert texts[str(healthy.pk)] == str(healthy)


def test_the_bot_page_marks_its_selected_probe_model(admin_client, failed_model):
    bot = BotFactory(discuss_probe_mode="model", discuss_probe_model=failed_model)

    page = admin_client.get(f"/admin/agents/bot/{bot.pk}/change/").content.decode()

    assert f'<option value="{failed_model.pk}" selected>⚠ {failed_model} — {MARK}</option>' in page
