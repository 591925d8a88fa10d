"""P2-P8: resolution of the judge, the fail-closed vs ungated exits, and the gate through the real adapters."""

import logging

import pytest
from cryptography.fernet import Fernet
from django.db import DatabaseError

from agents.llm.base import ChatMessage, ToolCall
from agents.models import Bot, UserProfile
from probe.models import ProbeJudgement
from probe.rules import Cause
from probe.selectors import gate_config_get
from probe.services import probe_gate_run
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory
from tests.stubs.llm_servers import StubResponse, openai_chat_body, openai_error_body

pytestmark = pytest.mark.django_db

TRANSCRIPT = [
    ChatMessage(role="user", content="alice: shall we ship on friday?"),
    ChatMessage(role="user", content="bob: @Planner what do you think?"),
]


def decide_body(should_act: str, reason: str, **fields) -> dict:
    return openai_chat_body(tool_calls=[("decide", {"should_act": should_act, "reason": reason})], **fields)


# --- Resolution (TestResolveDiscussProbeModel) and query counts (P3) -------------------------------------


def test_bot_override_wins_and_skips_the_account_read_P2_P3(make_judge, make_discuss_bot, django_assert_num_queries):
    """The bot's probe model wins over the owner's title model; 1 query, the account is not read."""
    # given
    judge = make_judge()
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge, title_model=make_judge())
    # when
    with django_assert_num_queries(1) as captured:
        config = gate_config_get(bot=bot)
    # then
    assert (config.model, config.source, config.cause, config.gate_ran) == (judge, "configured", "", True)
    assert "agents_userprofile" not in captured.captured_queries[0]["sql"]


def test_inherit_falls_back_to_the_owner_title_model_P2_P3(make_judge, make_discuss_bot, django_assert_num_queries):
    # given
    title_model = make_judge()
    bot = make_discuss_bot(mode=Bot.ProbeMode.INHERIT, title_model=title_model)
    # when: at most the seed's 2 queries uncached (we read the profile and its model in one)
    with django_assert_num_queries(1):
        config = gate_config_get(bot=bot)
    # then
    assert (config.model, config.source, config.cause) == (title_model, "inherited", "")


def test_neither_configured_disables_the_gate_P2(make_discuss_bot):
    bot = make_discuss_bot(mode=Bot.ProbeMode.INHERIT)
    config = gate_config_get(bot=bot)
    assert (config.model, config.cause, config.gate_ran) == (None, Cause.NOT_CONFIGURED, False)


def test_mode_off_is_ungated_without_a_query_P2(make_judge, make_discuss_bot, django_assert_num_queries):
    bot = make_discuss_bot(mode=Bot.ProbeMode.OFF, judge=make_judge())
    with django_assert_num_queries(0):
        config = gate_config_get(bot=bot)
    assert (config.cause, config.gate_ran) == (Cause.MODE_OFF, False)


def test_cached_config_costs_zero_queries_and_a_save_invalidates_it_P3(
    make_judge, make_discuss_bot, django_assert_num_queries
):
    # given a resolved (cached) configuration
    first, second = make_judge(), make_judge()
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=first)
    gate_config_get(bot=bot)
    # when / then: the next message costs nothing for gate configuration
    with django_assert_num_queries(0):
        assert gate_config_get(bot=bot).model == first
    # when the bot is saved with another judge, the cached entry no longer applies
    bot.discuss_probe_model = second
    bot.save()
    reloaded = Bot.objects.get(pk=bot.pk)
    with django_assert_num_queries(1):
        assert gate_config_get(bot=reloaded).model == second


# --- Capability (P4) and the asymmetries of the exit table -------------------------------------------------


@pytest.mark.parametrize(
    ("supports_tool_calls", "supports_vision", "can_judge"),
    [(True, False, True), (True, True, True), (False, False, False), (False, True, False)],
    ids=["tool-call", "vision+tool-call", "none", "vision only"],
)
def test_model_can_judge_only_with_tool_calls_P4(
    make_judge, make_discuss_bot, supports_tool_calls, supports_vision, can_judge
):
    """TestDiscussProbeModelCanJudge / TestDiscussProbeCapabilityFailureRespectsConfigSource."""
    judge = make_judge(supports_tool_calls=supports_tool_calls, supports_vision=supports_vision)
    configured = gate_config_get(bot=make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge))
    inherited = gate_config_get(bot=make_discuss_bot(mode=Bot.ProbeMode.INHERIT, title_model=judge))
    if can_judge:
        assert (configured.cause, inherited.cause) == ("", "")
    else:
        # explicit choice fails closed; an inherited title model that could never judge leaves the bot ungated
        assert (configured.cause, configured.gate_ran) == (Cause.CONFIGURED_MODEL_CANNOT_CALL_TOOLS, True)
        assert (inherited.cause, inherited.gate_ran) == (Cause.INHERITED_MODEL_CANNOT_CALL_TOOLS, False)


def test_configured_gate_fails_closed_on_a_read_error_P2(make_judge, make_discuss_bot, mocker):
    """TestDiscussProbeConfiguredGateFailsClosedOnResolveError: an explicit model that cannot be read shuts."""
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    mocker.patch("probe.selectors.LLMModel.objects.select_related", side_effect=DatabaseError("connection lost"))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.gate_ran, result.activated, result.outcome, result.cause) == (
        True,
        False,
        "error",
        Cause.CONFIG_UNREADABLE,
    )
    assert result.proceeds is False


def test_unconfigured_gate_stays_disabled_on_a_lookup_error_P2(make_discuss_bot, mocker):
    """TestDiscussProbeUnconfiguredStaysDisabledOnResolveError: failing to find a fallback never mutes a bot."""
    bot = make_discuss_bot(mode=Bot.ProbeMode.INHERIT)
    mocker.patch("probe.selectors.UserProfile.objects.select_related", side_effect=DatabaseError("connection lost"))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.gate_ran, result.outcome, result.cause, result.proceeds) == (
        False,
        "disabled",
        Cause.FALLBACK_LOOKUP_FAILED,
        True,
    )


def test_lookup_errors_are_not_cached_P3(make_judge, make_discuss_bot, mocker):
    judge = make_judge()
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge)
    mocker.patch("probe.selectors.LLMModel.objects.select_related", side_effect=DatabaseError("blip"))
    assert gate_config_get(bot=bot).cause == Cause.CONFIG_UNREADABLE
    mocker.stopall()
    assert gate_config_get(bot=bot).model == judge


@pytest.mark.parametrize("source", ["configured", "inherited"])
def test_undecryptable_judge_api_key_fails_closed_logged_recorded_and_not_cached_P2_P3_P8(
    make_judge, make_discuss_bot, settings, caplog, llm_stub, source
):
    """A provider key that cannot be decrypted (FIELD_ENCRYPTION_KEY changed) shuts the gate, never crashes it."""
    # given: the judge's key was stored under the old key, and the deployment now runs with another one
    judge = make_judge()
    if source == "configured":
        bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge)
    else:
        bot = make_discuss_bot(mode=Bot.ProbeMode.INHERIT, title_model=judge)
    old_keys = settings.FIELD_ENCRYPTION_KEY
    settings.FIELD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]
    caplog.set_level(logging.INFO, logger="probe.services")
    # when
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    # then: failed closed, one row, one WARN record, no request sent
    assert (result.gate_ran, result.activated, result.outcome, result.cause, result.proceeds) == (
        True,
        False,
        "error",
        Cause.CONFIG_UNREADABLE,
        False,
    )
    row = ProbeJudgement.objects.get()
    assert (row.pk, row.bot_id, row.gate_ran, row.outcome, row.cause, row.model_id, row.error) == (
        result.judgement.pk,
        bot.pk,
        True,
        "error",
        Cause.CONFIG_UNREADABLE,
        None,
        "A stored secret cannot be decrypted: check FIELD_ENCRYPTION_KEY.",
    )
    records = [record for record in caplog.records if record.name == "probe.services"]
    assert [(record.levelno, record.getMessage(), record.cause, record.judgement_id) for record in records] == [
        (logging.WARNING, "discuss probe", Cause.CONFIG_UNREADABLE, row.pk)
    ]
    assert "sk-judge-secret-0001" not in records[0].error
    assert llm_stub.requests_for("openai_chat") == []
    # and: the failure was not cached - with the key restored, the next wake resolves the judge
    settings.FIELD_ENCRYPTION_KEY = old_keys
    assert (gate_config_get(bot=bot).cause, gate_config_get(bot=bot).model) == ("", judge)


@pytest.mark.parametrize("source", ["configured", "inherited"])
@pytest.mark.parametrize("what", ["model disabled", "provider disabled"])
def test_unusable_judge_fails_closed_from_either_source_P2(make_judge, make_discuss_bot, source, what):
    """Documented asymmetry kept from the reference: model_unresolvable fails closed even when inherited."""
    judge = make_judge()
    if what == "model disabled":
        judge.is_enabled = False
        judge.save()
    else:
        judge.provider.is_enabled = False
        judge.provider.save()
    if source == "configured":
        bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge)
    else:
        bot = make_discuss_bot(mode=Bot.ProbeMode.INHERIT, title_model=judge)
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.gate_ran, result.activated) == (Cause.MODEL_UNRESOLVABLE, True, False)


def test_model_mode_without_a_model_fails_closed_P2(make_discuss_bot):
    """A 'model' bot whose model was deleted (SET_NULL) stays shut rather than silently ungated."""
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=None)
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.gate_ran, result.outcome) == (Cause.MODEL_UNRESOLVABLE, True, "error")


# --- The gate through the real adapter and the stub (P5-P8) ------------------------------------------------


def test_send_activates_and_records_the_judgement_P7_P8(make_judge, make_discuss_bot, llm_stub):
    # given
    judge = make_judge()
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge)
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("send", "answer bob", input_tokens=321)))
    # when
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT, wake_id=77)
    # then
    assert (result.activated, result.reason, result.cause, result.outcome) == (True, "answer bob", "judged", "act")
    row = ProbeJudgement.objects.get()
    assert (row.bot_id, row.model_id, row.wake_id, row.outcome, row.activated) == (bot.pk, judge.pk, 77, "act", True)
    assert (row.input_tokens, row.output_tokens, row.reason) == (321, 20, "answer bob")
    sent = llm_stub.requests[0].json
    assert sent["messages"][-1]["content"] == "bob: @Planner what do you think?"
    assert sent["messages"][0]["role"] == "system" and "The bot: Planner." in sent["messages"][0]["content"]
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["decide"]
    assert sent["max_tokens"] == 2048


def test_l3_a_judge_reason_with_nul_and_an_unpaired_surrogate_is_stored_and_logged_P8(
    make_judge, make_discuss_bot, llm_stub, caplog
):
    """Issue 9 item 10: such a reason crashed the judgement's INSERT and left no P8 record."""
    # given
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("send", "bob asked \ud800 twice\x00")))
    # when
    with caplog.at_level(logging.INFO, logger="probe.services"):
        result = probe_gate_run(bot=bot, transcript=TRANSCRIPT, wake_id=5)
    # then
    assert (result.activated, result.reason) == (True, "bob asked \ufffd twice\ufffd")
    assert ProbeJudgement.objects.get().reason == "bob asked \ufffd twice\ufffd"
    assert [record.reason for record in caplog.records if record.getMessage() == "discuss probe"] == [
        "bob asked \ufffd twice\ufffd"
    ]


def test_no_action_keeps_the_bot_silent_P7(make_judge, make_discuss_bot, llm_stub):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("no_action", "chatter between others")))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.activated, result.outcome, result.proceeds) == (False, "no_action", False)


def test_text_instead_of_a_call_is_missing_and_fails_closed_P7(make_judge, make_discuss_bot, llm_stub):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="I think the bot should answer.")))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.activated, result.outcome, result.gate_ran) == (False, "missing", True)


def test_unparseable_arguments_are_malformed_P7(make_judge, make_discuss_bot, llm_stub):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    body = openai_chat_body(tool_calls=[("decide", '{"should_act": "send", "reason": ')])
    llm_stub.enqueue("openai_chat", StubResponse(body=body))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.activated, result.outcome) == (False, "malformed")


def test_small_window_fails_closed_before_any_request_P5(make_judge, make_discuss_bot, llm_stub):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(context_window=4097))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.gate_ran, result.activated) == (Cause.MODEL_WINDOW_TOO_SMALL, True, False)
    assert llm_stub.requests == []


def test_no_valid_window_fails_closed_before_any_request_P5(make_judge, make_discuss_bot, llm_stub):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    transcript = [
        ChatMessage(role="assistant", content="", tool_calls=(ToolCall(name="search", arguments={}, id="c1"),)),
        ChatMessage(role="tool", content="result", tool_call_id="c1"),
    ]
    result = probe_gate_run(bot=bot, transcript=transcript[1:])
    assert (result.cause, result.outcome) == (Cause.NO_VALID_WINDOW, "error")
    assert llm_stub.requests == []


def test_provider_fault_fails_closed_and_is_retryable_P7_P10(make_judge, make_discuss_bot, llm_stub):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    llm_stub.enqueue("openai_chat", StubResponse(status=503, body=openai_error_body(message="overloaded")))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.activated, result.retryable, result.outcome) == (
        Cause.MODEL_CALL_FAILED,
        False,
        True,
        "error",
    )
    assert "TransientError" in result.judgement.error


def test_context_overflow_fails_closed_and_is_not_retried_P7(make_judge, make_discuss_bot, llm_stub):
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    overflow = openai_error_body(message="maximum context length", code="context_length_exceeded", param="messages")
    llm_stub.enqueue("openai_chat", StubResponse(status=400, body=overflow))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.activated, result.retryable) == (Cause.MODEL_CALL_FAILED, False, False)


def test_an_answer_without_the_documented_shape_fails_closed_with_one_record_P7_P8(
    make_judge, make_discuss_bot, llm_stub
):
    """A 200 whose JSON lacks `choices[0].message` is a provider error: silent bot, one row, no exception."""
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "judge", "choices": [{"index": 0}]}
    llm_stub.enqueue("openai_chat", StubResponse(body=body))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.outcome, result.activated, result.retryable) == (
        Cause.MODEL_CALL_FAILED,
        "error",
        False,
        False,
    )
    assert result.judgement.error.startswith("PermanentError: ")
    assert ProbeJudgement.objects.filter(bot=bot).count() == 1


def test_timeout_fails_closed_P7(make_judge, make_discuss_bot, llm_stub):
    judge = make_judge()
    judge.provider.timeout_seconds = 0.3
    judge.provider.save()
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge)
    llm_stub.enqueue("openai_chat", StubResponse(body=decide_body("send", "late"), delay_seconds=1.5))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.activated, result.retryable) == (Cause.MODEL_CALL_FAILED, False, True)


def test_unknown_provider_kind_is_credentials_unresolvable(make_discuss_bot):
    provider = ProviderFactory(kind="carrier_pigeon")
    judge = LLMModelFactory(provider=provider, supports_tool_calls=True)
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge)
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.gate_ran, result.activated) == (Cause.CREDENTIALS_UNRESOLVABLE, True, False)


def test_local_rules_judge_answers_offline(make_judge, make_discuss_bot):
    """The embedded default's rule-based provider judges a direct question to the bot as send."""
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(kind="local_rules"))
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.activated) == ("judged", True)


def test_ungated_exit_still_writes_one_row_P8(make_discuss_bot):
    bot = BotFactory(discuss_probe_mode=Bot.ProbeMode.OFF)
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.gate_ran, result.proceeds, result.outcome) == (False, True, "disabled")
    assert ProbeJudgement.objects.filter(bot=bot, cause=Cause.MODE_OFF, gate_ran=False).count() == 1
    assert not UserProfile.objects.exists()


def test_a_cached_gate_costs_only_its_judgement_row_P3(make_judge, make_discuss_bot, django_assert_num_queries):
    """P3 end to end: with the configuration cached, the gate's only query is the ProbeJudgement insert."""
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(context_window=4000))
    probe_gate_run(bot=bot, transcript=TRANSCRIPT)  # warms the cache
    with django_assert_num_queries(1) as captured:
        result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert result.cause == Cause.MODEL_WINDOW_TOO_SMALL
    assert captured.captured_queries[0]["sql"].startswith("INSERT INTO")


def test_one_judge_call_is_one_request_whatever_the_providers_sdk_retries_P10(make_judge, make_discuss_bot, llm_stub):
    """The SDK does not retry the judge (the wake does, with backoff): a 503 is one request and fails closed."""
    judge = make_judge()
    judge.provider.max_retries = 2
    judge.provider.save()
    bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge)
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(status=503, body=openai_error_body(message="overloaded")),
        StubResponse(body=decide_body("send", "would have been accepted")),
    )
    result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
    assert (result.cause, result.activated, result.retryable) == (Cause.MODEL_CALL_FAILED, False, True)
    assert len(llm_stub.requests_for("openai_chat")) == 1
