"""O5 (ARCHITECTURE §11.1, issue 22): a discuss turn sees the conversation its judge saw, whatever
shared_thread_enabled says, with the activation contract last; explain lists it. Real path: webhooks -> wake ->
the judge (Anthropic SDK at the LLM stub) -> the turn -> the primary (OpenAI SDK at the stub) -> Feishu stub."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import Turn
from feishu.discuss.fire import FIRE_STARTED
from feishu.discuss.sweep import discuss_wakes_sweep
from probe.prompts import activation_contract
from tests.feishu.test_discuss_bridge import discuss_bot  # noqa: F401  (the fixture)
from tests.probe.conftest import make_discuss_bot, make_judge  # noqa: F401  (fixtures)
from tests.stubs.llm_servers import StubResponse, anthropic_body, openai_chat_body
from threadcontext.explain import decision_explain_text
from threadcontext.models import ThreadContextDecision, Workspace

pytestmark = pytest.mark.django_db


def test_a_discuss_turn_gets_the_judged_transcript_with_labels_and_the_contract_last_O5(
    feishu,
    discuss_bot,  # noqa: F811
    llm_stub,
    django_capture_on_commit_callbacks,
):
    # given: the hub default (shared thread context off) and a short exchange between two people
    workspace = Workspace.objects.get(bot_profile=discuss_bot.slug, chat_id="oc_team")
    assert workspace.shared_thread_enabled is None  # the hub's default: off
    llm_stub.respond_with(
        "anthropic",
        lambda request: StubResponse(
            body=anthropic_body(tool_calls=[("decide", {"should_act": "send", "reason": "bob asks"})])
        ),
    )
    llm_stub.respond_with("openai_chat", lambda request: StubResponse(body=openai_chat_body(text="Flaky test.")))
    topic = {"chat_id": "oc_team", "root_id": "om_root", "thread_id": "omt_1"}
    feishu.say(discuss_bot, text="the build is red again", sender="ou_alice", **topic)
    feishu.say(discuss_bot, text="why is the build red?", sender="ou_bob", message_id="om_bob", **topic)
    # when: the wakes fire, the judge says send
    with django_capture_on_commit_callbacks(execute=True):
        assert FIRE_STARTED in discuss_wakes_sweep(now=timezone.now() + timedelta(minutes=1))
    # then: the primary's request carries the conversation, each line with its author, and the contract last
    turn = Turn.objects.get(bot=discuss_bot, source_message_id="om_bob")
    assert turn.status == "delivered"
    messages = turn.model_input["request"]["messages"]
    assert messages[-1] == {"role": "user", "content": activation_contract(reason="bob asks")}
    request = messages[-2]["content"]
    assert request.startswith("[The conversation that woke you, oldest first]\nou_alice: the build is red again\n")
    assert request.endswith("why is the build red?")
    # and explain lists it (the decision's preview is what the model got)
    decision = ThreadContextDecision.objects.get(pk=turn.context_decision_id)
    assert "ou_alice: the build is red again" in decision.prompt_preview
    explained = decision_explain_text(decision=decision)
    assert "discuss transcript (2 lines, what the judge saw; always given):" in explained
    assert "ou_alice: the build is red again" in explained
    # and the mode line says the workspace's mode is not applied, which setting wins and where to change it
    assert "mode:          shared (not applied: shared thread context is off, and that wins;" in explained
