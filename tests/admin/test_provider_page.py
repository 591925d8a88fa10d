"""The Provider page: "Test connection" stores its result and time on the provider; the list and page show it."""

import pytest

from agents.models import Provider
from tests.agents.test_turns_admin import stub_model
from tests.stubs.llm_servers import AUTH_BODIES, StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db


def test_a_failed_test_is_stored_on_the_provider_and_shown_in_its_list(admin_client, llm_stub):
    # given a provider whose key the stub refuses
    model = stub_model(llm_stub)
    llm_stub.enqueue("openai_chat", StubResponse(status=401, body=AUTH_BODIES["openai_chat"]))

    # when the page's button posts the action for this provider
    admin_client.post(
        "/admin/agents/provider/", {"action": "test_connection", "_selected_action": [model.provider_id], "index": 0}
    )

    # then
    provider = Provider.objects.get(pk=model.provider_id)
    assert provider.last_test_ok is False
    assert provider.last_test_at is not None
    assert provider.last_test_detail == "AuthenticationError: stub-openai: Incorrect API key provided: sk-***."
    listed = admin_client.get("/admin/agents/provider/").content.decode()
    assert "FAILED at " in listed
    assert "sk-judge" not in listed


def test_a_passing_test_replaces_the_failed_result(admin_client, llm_stub):
    model = stub_model(llm_stub)
    Provider.objects.filter(pk=model.provider_id).update(last_test_ok=False, last_test_detail="old failure")
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="pong")))

    admin_client.post("/admin/agents/llmmodel/", {"action": "test_connection", "_selected_action": [model.pk]})

    provider = Provider.objects.get(pk=model.provider_id)
    assert provider.last_test_ok is True
    assert provider.last_test_detail.startswith(f"{model.name}: OK in ")


def test_the_provider_page_has_the_test_button_and_the_last_result(admin_client, llm_stub):
    model = stub_model(llm_stub)

    page = admin_client.get(f"/admin/agents/provider/{model.provider_id}/change/").content.decode()

    assert 'id="provider-test-connection"' in page
    assert f'name="_selected_action" value="{model.provider_id}"' in page
    assert "never tested" in page
