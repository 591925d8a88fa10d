"""P8: one structured record per exit, the same seven fields everywhere, levels by cause - with a real threshold.

caplog.set_level puts a real threshold on both the logger and the capturing handler: a record below it is
never seen, exactly like a default INFO deployment (the seed's always-Enabled handler hid DEBUG exits).
"""

import logging

import pytest
from django.db import DatabaseError

from agents.llm.base import ChatMessage
from agents.models import Bot
from probe.rules import Cause
from probe.services import LOG_MESSAGE, log_level_for, probe_gate_run
from tests.stubs.llm_servers import StubResponse, openai_chat_body

pytestmark = pytest.mark.django_db

LOGGER = "probe.services"
SEVEN_FIELDS = ("bot_id", "session_id", "model_id", "cause", "outcome", "gate_ran", "activated")
TRANSCRIPT = [ChatMessage(role="user", content="carol: @Planner can you check the build?")]


def gate_records(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == LOGGER and record.getMessage() == LOG_MESSAGE]


def decide(should_act: str) -> StubResponse:
    return StubResponse(body=openai_chat_body(tool_calls=[("decide", {"should_act": should_act, "reason": "r"})]))


def test_every_exit_logs_once_with_the_same_fields_P8(caplog, make_judge, make_discuss_bot, llm_stub, mocker):
    """TestDiscussProbeLogsEveryExitUniformly: one record per exit, seven fields, gate_ran as returned."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    judge = make_judge()
    scenarios = []
    # judged
    llm_stub.enqueue("openai_chat", decide("send"))
    scenarios.append(("judged", make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge), None))
    # not configured / off
    scenarios.append(("not_configured", make_discuss_bot(mode=Bot.ProbeMode.INHERIT), None))
    scenarios.append(("mode_off", make_discuss_bot(mode=Bot.ProbeMode.OFF), None))
    # config_unreadable (configured) and fallback_lookup_failed (inherited)
    scenarios.append(("config_unreadable", make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=judge), "model"))
    scenarios.append(("fallback_lookup_failed", make_discuss_bot(mode=Bot.ProbeMode.INHERIT), "profile"))
    for expected_cause, bot, broken in scenarios:
        caplog.clear()
        if broken == "model":
            mocker.patch("probe.selectors.LLMModel.objects.select_related", side_effect=DatabaseError("down"))
        if broken == "profile":
            mocker.patch("probe.selectors.UserProfile.objects.select_related", side_effect=DatabaseError("down"))
        # when
        result = probe_gate_run(bot=bot, transcript=TRANSCRIPT)
        mocker.stopall()
        # then
        (record,) = gate_records(caplog)
        assert all(hasattr(record, name) for name in SEVEN_FIELDS), expected_cause
        assert (record.cause, record.gate_ran, record.activated, record.outcome) == (
            expected_cause,
            result.gate_ran,
            result.activated,
            result.outcome,
        )
        assert record.bot_id == bot.pk
    # the shut and the absent exits differ where an operator looks
    assert result.cause == "fallback_lookup_failed" and result.gate_ran is False and result.outcome == "disabled"


def test_log_distinguishes_shut_from_absent_P8(caplog, make_judge, make_discuss_bot, mocker):
    """TestDiscussProbeLogDistinguishesShutFromAbsent: different causes, gate_ran differs, the shut one is WARN."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    mocker.patch("probe.selectors.LLMModel.objects.select_related", side_effect=DatabaseError("down"))
    shut = probe_gate_run(bot=make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge()), transcript=TRANSCRIPT)
    absent = probe_gate_run(bot=make_discuss_bot(mode=Bot.ProbeMode.INHERIT), transcript=TRANSCRIPT)
    shut_record, absent_record = gate_records(caplog)
    assert (shut_record.cause, shut_record.gate_ran, shut_record.levelno) == (
        "config_unreadable",
        True,
        logging.WARNING,
    )
    assert (absent_record.cause, absent_record.gate_ran, absent_record.levelno) == ("not_configured", False, 10)
    assert (shut.gate_ran, absent.gate_ran) == (True, False)
    assert shut_record.error == "down"
    assert not hasattr(absent_record, "error")


def test_abnormal_exits_are_visible_at_info_P8(caplog, make_judge, make_discuss_bot, mocker):
    """TestDiscussProbeAbnormalExitsAreVisibleAtInfo: at INFO the unreadable gate is one WARN, not_configured none."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    probe_gate_run(bot=make_discuss_bot(mode=Bot.ProbeMode.INHERIT), transcript=TRANSCRIPT)
    assert gate_records(caplog) == []
    mocker.patch("probe.selectors.LLMModel.objects.select_related", side_effect=DatabaseError("down"))
    probe_gate_run(bot=make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge()), transcript=TRANSCRIPT)
    (record,) = gate_records(caplog)
    assert record.levelno == logging.WARNING


@pytest.mark.parametrize(
    ("scenario", "cause", "level"),
    [
        ("not configured", "not_configured", logging.DEBUG),
        ("mode off", "mode_off", logging.DEBUG),
        ("inherited without tools", "inherited_model_cannot_call_tools", logging.WARNING),
        ("configured without tools", "configured_model_cannot_call_tools", logging.WARNING),
        ("small window", "model_window_too_small", logging.WARNING),
        ("tool result only", "no_valid_window", logging.WARNING),
        ("judged no_action", "judged", logging.INFO),
        ("judged send", "judged", logging.INFO),
        ("judged missing", "judged", logging.WARNING),
        ("judged malformed", "judged", logging.WARNING),
        ("provider down", "model_call_failed", logging.WARNING),
    ],
)
def test_log_level_by_cause_P8(caplog, make_judge, make_discuss_bot, llm_stub, scenario, cause, level):
    """TestDiscussProbeLogLevelByCause, each exit driven through probe_gate_run (not the helper)."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    transcript = TRANSCRIPT
    if scenario == "not configured":
        bot = make_discuss_bot(mode=Bot.ProbeMode.INHERIT)
    elif scenario == "mode off":
        bot = make_discuss_bot(mode=Bot.ProbeMode.OFF)
    elif scenario == "inherited without tools":
        bot = make_discuss_bot(mode=Bot.ProbeMode.INHERIT, title_model=make_judge(supports_tool_calls=False))
    elif scenario == "configured without tools":
        bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(supports_tool_calls=False))
    elif scenario == "small window":
        bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge(context_window=4000))
    else:
        bot = make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge())
    if scenario == "tool result only":
        transcript = [ChatMessage(role="tool", content="exit 0", tool_call_id="c1")]
    responses = {
        "judged no_action": decide("no_action"),
        "judged send": decide("send"),
        "judged missing": StubResponse(body=openai_chat_body(text="sure")),
        "judged malformed": decide("SEND"),
        "provider down": StubResponse(status=500, body={"error": {"message": "boom", "type": "server_error"}}),
    }
    if scenario in responses:
        llm_stub.enqueue("openai_chat", responses[scenario])
    # when
    probe_gate_run(bot=bot, transcript=transcript)
    # then
    (record,) = gate_records(caplog)
    assert (record.cause, record.levelno) == (cause, level)


def test_level_rule_is_by_cause_not_by_gate_ran_P8():
    """Seed review A4: an ungated exit without an error is still WARN unless its cause is a quiet one."""
    assert log_level_for(cause=Cause.INHERITED_MODEL_CANNOT_CALL_TOOLS, gate_ran=False, outcome="disabled",
                         has_error=False) == logging.WARNING  # fmt: skip
    assert log_level_for(cause=Cause.NOT_CONFIGURED, gate_ran=False, outcome="disabled", has_error=False) == 10


def test_no_secret_in_the_gate_records(caplog, make_judge, make_discuss_bot, llm_stub):
    caplog.set_level(logging.DEBUG)
    llm_stub.enqueue("openai_chat", StubResponse(status=401, body={"error": {"message": "bad key", "type": "auth"}}))
    probe_gate_run(bot=make_discuss_bot(mode=Bot.ProbeMode.MODEL, judge=make_judge()), transcript=TRANSCRIPT)
    assert "sk-judge-secret-0001" not in caplog.text
    for record in caplog.records:
        assert "sk-judge-secret-0001" not in str(record.__dict__)
