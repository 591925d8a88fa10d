"""Turns (T2, T3, P9): idempotent ledger rows, crash-safe runs, retries, failures, context-window fitting."""

import pytest

from agents.llm.base import ChatMessage
from agents.llm.local_rules import ECHO_LABEL
from agents.models import Message, Provider, Thread, Turn
from agents.services.threads import message_create
from agents.services.turns import (
    DEFAULT_CONTEXT_WINDOW_TOKENS,
    EMPTY_ANSWER_RETRY_NOTE,
    TURN_MAX_ATTEMPTS,
    Prepared,
    TurnChannel,
    TurnRetryLater,
    backoff_seconds,
    context_budget_tokens,
    context_fit,
    context_messages_upper_bound,
    estimate_tokens,
    turn_get_or_create,
    turn_run,
)
from agents.services.turns import channels as turn_channels
from agents.tasks import turn_run_task
from tests.agents.factories import BotFactory, LLMModelFactory, ProviderFactory, ThreadFactory
from tests.stubs.llm_servers import (
    AUTH_BODIES,
    OVERFLOW_BODIES,
    RATE_LIMIT_BODIES,
    SERVER_ERROR_BODIES,
    StubResponse,
    openai_chat_body,
)

pytestmark = pytest.mark.django_db


def stub_bot(llm_stub, *, context_window=0, max_output_tokens=1024, system_prompt="You are Tutu."):
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key="k", max_retries=0, timeout_seconds=5
    )
    model = LLMModelFactory(
        provider=provider, name="gpt-4o", context_window=context_window, max_output_tokens=max_output_tokens
    )
    return BotFactory(primary_model=model, system_prompt=system_prompt, name="Tutu")


def rest_turn(thread: Thread, content: str = "hello") -> Turn:
    message = message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content=content, author="alice")
    turn, _ = turn_get_or_create(
        bot=thread.bot, thread=thread, trigger=Turn.Trigger.REST, source_message_id=f"rest:{message.pk}",
        user_message=message,
    )  # fmt: skip
    return turn


class ScriptedChannel(TurnChannel):
    """What a channel with its own prepare (the Feishu bridge's) hands the runner: the person's text, the rendered
    prompt and, for a discuss turn, the activation contract."""

    def __init__(self, *, content: str, prompt: str = "", author: str = "", contract: str = "") -> None:
        self.content, self.prompt, self.author, self.contract = content, prompt, author, contract

    def prepare(self, *, turn: Turn) -> Prepared:
        return Prepared(content=self.content, prompt=self.prompt, author=self.author)

    def activation_contract(self, *, turn: Turn) -> str:
        return self.contract


@pytest.fixture
def scripted(monkeypatch):
    """Registers a ScriptedChannel for threads whose channel is "scripted"; returns such a thread's factory."""

    def install(*, bot, **prepared) -> Thread:
        monkeypatch.setitem(turn_channels._channels, "scripted", ScriptedChannel(**prepared))
        return ThreadFactory(bot=bot, channel="scripted")

    return install


def run(turn: Turn) -> Message | None:
    """One run through the one pipeline (as the task makes it); the turn's stored reply afterwards."""
    turn_run(turn_id=turn.pk)
    return Turn.objects.select_related("reply_message").get(pk=turn.pk).reply_message


# --- Pure rules --------------------------------------------------------------------------------------------


def test_t3_context_fit_keeps_the_newest_contiguous_messages_that_fit():
    # given: five messages of 10 tokens each (36 chars → 9 + 1 overhead... estimated exactly below)
    messages = [ChatMessage(role="user", content=str(i) * 36) for i in range(5)]
    cost = estimate_tokens("x" * 36)
    # when
    fitted = context_fit(messages=messages, budget_tokens=cost * 3 + cost - 1)
    # then: the newest three, oldest first
    assert [message.content[0] for message in fitted] == ["2", "3", "4"]


def test_t3_token_estimate_counts_cjk_as_one_token_per_character():
    # given / when / then: ASCII at four characters a token, CJK (and other non-ASCII) at one, + 4 per message
    assert estimate_tokens("x" * 36) == 9 + 4
    assert estimate_tokens("我们周五发布吗") == 7 + 4
    assert estimate_tokens("ok 好的") == 1 + 2 + 4  # "ok " → 1, "好的" → 2
    assert estimate_tokens("") == 4


def test_t3_a_chinese_context_is_fitted_by_its_real_size():
    # given: 100 Chinese characters a message (~100 tokens, not the 25 a chars/4 estimate gives)
    messages = [ChatMessage(role="user", content=f"{i}" + "好" * 99) for i in range(10)]
    # when: 350 tokens of budget
    fitted = context_fit(messages=messages, budget_tokens=350)
    # then: three messages of 104 estimated tokens (312), not the ten a chars/4 estimate would admit
    assert [message.content[0] for message in fitted] == ["7", "8", "9"]


def test_t3_context_fit_stops_at_the_first_message_that_does_not_fit():
    # given: an old small message behind a big one — the window stays contiguous
    messages = [
        ChatMessage(role="user", content="old"),
        ChatMessage(role="user", content="x" * 4000),
        ChatMessage(role="user", content="new"),
    ]
    # when
    fitted = context_fit(messages=messages, budget_tokens=100)
    # then
    assert [message.content for message in fitted] == ["new"]


def test_t3_undeclared_window_uses_the_default():
    assert context_budget_tokens(context_window=0, max_output_tokens=1024, fixed_tokens=100) == (
        DEFAULT_CONTEXT_WINDOW_TOKENS - 1024 - 100
    )
    assert context_budget_tokens(context_window=1000, max_output_tokens=4096, fixed_tokens=50) == 1000 - 250 - 50


def test_t2_backoff_is_exponential_capped_and_honours_retry_after():
    assert [backoff_seconds(attempt=n) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]
    assert backoff_seconds(attempt=20) == 300.0
    assert backoff_seconds(attempt=1, retry_after_seconds=30) == 30.0


# --- turn_get_or_create ------------------------------------------------------------------------------------


def test_t2_same_trigger_twice_is_one_turn():
    # given
    thread = ThreadFactory()
    # when
    first, created_first = turn_get_or_create(
        bot=thread.bot, thread=thread, trigger=Turn.Trigger.MENTION, source_message_id="om_1"
    )
    second, created_second = turn_get_or_create(
        bot=thread.bot, thread=thread, trigger=Turn.Trigger.MENTION, source_message_id="om_1"
    )
    # then
    assert (created_first, created_second) == (True, False)
    assert first.pk == second.pk
    assert Turn.objects.count() == 1


# --- turn_run ----------------------------------------------------------------------------------------------


def test_t2_same_trigger_run_twice_gives_one_reply_and_one_model_call(llm_stub):
    # given
    thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread)
    llm_stub.enqueue(
        "openai_chat", StubResponse(body=openai_chat_body(text="Hi Alice.", input_tokens=30, output_tokens=4))
    )
    # when
    first = run(turn)
    again, _ = turn_get_or_create(
        bot=thread.bot, thread=thread, trigger=Turn.Trigger.REST, source_message_id=turn.source_message_id
    )
    second = run(again)
    # then
    assert first.pk == second.pk
    assert first.content == "Hi Alice."
    assert first.kind == Message.Kind.AGENT_REPLY
    assert first.visibility_mask == 3
    assert len(llm_stub.requests) == 1
    assert Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY).count() == 1
    turn.refresh_from_db()
    assert turn.status == Turn.Status.DELIVERED
    assert turn.reply_message_id == first.pk
    assert turn.attempts == 1
    assert turn.usage["input_tokens"] == 30
    assert turn.usage["output_tokens"] == 4
    assert first.usage["output_tokens"] == 4
    assert turn.started_at is not None and turn.finished_at is not None
    assert [entry["outcome"] for entry in turn.retry_history] == ["ok"]


def test_t2_rerun_after_a_crash_mid_call_stores_user_message_and_reply_once(llm_stub, mocker, scripted):
    # given: a Feishu-style turn (its channel prepares the prompt) whose run dies inside the provider call
    thread = scripted(bot=stub_bot(llm_stub), content="@Tutu hi", prompt="<rendered> @Tutu hi", author="bob")
    turn, _ = turn_get_or_create(bot=thread.bot, thread=thread, trigger=Turn.Trigger.MENTION, source_message_id="om_9")
    crash = mocker.patch("agents.services.turns.runner._complete", side_effect=SystemExit("killed"))
    with pytest.raises(SystemExit):
        run(turn)
    turn.refresh_from_db()
    assert (turn.status, turn.reply_message_id) == (Turn.Status.RUNNING, None)
    mocker.stop(crash)
    # when: the redelivered task runs it again
    reply = run(turn)
    # then
    users = Message.objects.filter(thread=thread, kind=Message.Kind.USER_MESSAGE)
    assert [(m.content, m.prompt, m.author) for m in users] == [("@Tutu hi", "<rendered> @Tutu hi", "bob")]
    assert Message.objects.filter(thread=thread, kind=Message.Kind.AGENT_REPLY).count() == 1
    turn.refresh_from_db()
    assert (turn.status, turn.reply_message_id, turn.attempts) == (Turn.Status.DELIVERED, reply.pk, 2)
    # T3: the model saw the rendered prompt, the person sees the raw text
    assert llm_stub.requests[-1].json["messages"][-1] == {"role": "user", "content": "<rendered> @Tutu hi"}


def test_t2_racing_runs_of_one_turn_leave_exactly_one_reply(llm_stub, mocker):
    # given: while run A waits for the model, run B (a redelivered task) runs the same turn to the end
    thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="from A")))
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="from B")))
    from agents.services.turns import runner as turns_module

    real = turns_module._complete
    inner_reply = {}

    def slow_call(**kwargs):
        result = real(**kwargs)  # A's answer ("from A"); B's call below is the plain one ("from B")
        if not inner_reply:
            inner_reply["message"] = None
            inner_reply["message"] = run(Turn.objects.get(pk=turn.pk))  # B completes first
        return result

    mocker.patch.object(turns_module, "_complete", side_effect=slow_call)
    # when
    outer = run(turn)
    # then: B's reply stands, A's was rolled back
    assert outer.pk == inner_reply["message"].pk
    assert [m.content for m in Message.objects.filter(kind=Message.Kind.AGENT_REPLY)] == ["from B"]


def test_t2_transient_error_retries_then_succeeds_through_the_task(llm_stub):
    # given: the provider answers 500 once, then a reply
    thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread)
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(status=500, body=SERVER_ERROR_BODIES["openai_chat"]),
        StubResponse(body=openai_chat_body(text="recovered")),
    )
    # when: the task (eager here) retries on TurnRetryLater
    turn_run_task.delay(turn.pk)
    # then
    turn.refresh_from_db()
    assert turn.status == Turn.Status.DELIVERED
    assert turn.reply_message.content == "recovered"
    assert turn.attempts == 2
    assert [entry["outcome"] for entry in turn.retry_history] == ["retry", "ok"]
    assert turn.retry_history[0]["retry_in_seconds"] == 2.0
    assert turn.retry_history[0]["error"].startswith("TransientError: ")
    assert turn.error == ""


def test_t2_a_soft_time_limit_mid_call_is_retried_not_left_running(llm_stub, mocker):
    """Celery raises SoftTimeLimitExceeded wherever the task is (here: inside the SDK's request); the turn
    treats it as a transient fault and is retried, instead of failing the task with the turn left running."""
    import openai.resources.chat.completions as completions
    from celery.exceptions import SoftTimeLimitExceeded

    # given: the first call is cut by the soft time limit, the second gets the stub's reply
    thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread)
    llm_stub.enqueue("openai_chat", StubResponse(body=openai_chat_body(text="in time")))
    real_create = completions.Completions.create
    calls = []

    def create(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise SoftTimeLimitExceeded()
        return real_create(self, *args, **kwargs)

    mocker.patch.object(completions.Completions, "create", create)
    # when
    outcome = turn_run_task.delay(turn.pk).get()
    # then
    turn.refresh_from_db()
    assert (turn.status, turn.attempts, outcome) == (Turn.Status.DELIVERED, 2, "delivered")
    assert turn.reply_message.content == "in time"
    assert [entry["outcome"] for entry in turn.retry_history] == ["retry", "ok"]
    assert turn.retry_history[0]["error"] == "TransientError: The provider call ran past the task's soft time limit."
    assert len(llm_stub.requests) == 1


def test_t2_rate_limit_retry_after_sets_the_countdown(llm_stub):
    # given
    thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread)
    llm_stub.enqueue(
        "openai_chat", StubResponse(status=429, body=RATE_LIMIT_BODIES["openai_chat"], headers={"retry-after": "42"})
    )
    # when
    with pytest.raises(TurnRetryLater) as caught:
        run(turn)
    # then
    assert caught.value.countdown_seconds == 42.0
    turn.refresh_from_db()
    assert turn.status == Turn.Status.QUEUED
    assert turn.error.startswith("RateLimitedError: ")


def test_t2_transient_errors_give_up_after_the_cap(llm_stub):
    # given: the provider fails every time
    thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread)
    llm_stub.respond_with(
        "openai_chat", lambda request: StubResponse(status=503, body=SERVER_ERROR_BODIES["openai_chat"])
    )
    # when
    turn_run_task.delay(turn.pk)
    # then
    turn.refresh_from_db()
    assert turn.status == Turn.Status.FAILED
    assert turn.attempts == TURN_MAX_ATTEMPTS
    assert len(llm_stub.requests) == TURN_MAX_ATTEMPTS
    assert turn.error.startswith(f"Gave up after {TURN_MAX_ATTEMPTS} attempts. Last error: TransientError: ")
    assert [entry["outcome"] for entry in turn.retry_history] == ["retry"] * (TURN_MAX_ATTEMPTS - 1) + ["failed"]
    assert not Message.objects.filter(kind=Message.Kind.AGENT_REPLY).exists()


@pytest.mark.parametrize(
    ("status", "body", "error_type"),
    [
        (401, AUTH_BODIES["openai_chat"], "AuthenticationError"),
        (400, OVERFLOW_BODIES["openai_chat"], "ContextOverflowError"),
    ],
)
def test_t2_permanent_failure_is_recorded_with_a_readable_reason(llm_stub, status, body, error_type):
    # given
    thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread)
    llm_stub.enqueue("openai_chat", StubResponse(status=status, body=body))
    # when
    reply = run(turn)
    # then
    assert reply is None
    turn.refresh_from_db()
    assert turn.status == Turn.Status.FAILED
    assert turn.error == f"{error_type}: {turn.bot.primary_model.provider.name}: {body['error']['message']}"
    assert turn.attempts == 1
    assert turn.finished_at is not None
    assert len(llm_stub.requests) == 1
    assert not Message.objects.filter(kind=Message.Kind.AGENT_REPLY).exists()
    # a failed turn is not re-run by a duplicate trigger
    assert run(turn) is None
    assert len(llm_stub.requests) == 1


def test_t2_an_answer_without_the_documented_shape_fails_the_turn_readably(llm_stub):
    """A 200 whose JSON lacks the documented fields is a permanent provider error, not a crash mid-turn."""
    # given
    thread = ThreadFactory(bot=stub_bot(llm_stub))
    turn = rest_turn(thread)
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o", "choices": [{"index": 0}]}
    llm_stub.enqueue("openai_chat", StubResponse(body=body))
    # when
    result = turn_run_task.delay(turn.pk).get()
    # then
    assert result == "failed"
    turn.refresh_from_db()
    assert turn.status == Turn.Status.FAILED
    assert turn.error.startswith(
        f"PermanentError: {turn.bot.primary_model.provider.name}: the provider's answer does not have the shape"
    )
    assert (turn.attempts, len(llm_stub.requests)) == (1, 1)
    assert not Message.objects.filter(kind=Message.Kind.AGENT_REPLY).exists()


def test_t2_disabled_provider_fails_without_a_call(llm_stub):
    # given
    bot = stub_bot(llm_stub)
    Provider.objects.filter(pk=bot.primary_model.provider_id).update(is_enabled=False)
    turn = rest_turn(ThreadFactory(bot=bot))
    # when
    reply = run(turn)
    # then
    turn.refresh_from_db()
    assert reply is None
    assert turn.status == Turn.Status.FAILED
    assert "disabled" in turn.error
    assert llm_stub.requests == []


def test_t2_disabled_bot_fails_without_a_call(llm_stub):
    # given
    bot = stub_bot(llm_stub)
    turn = rest_turn(ThreadFactory(bot=bot))
    bot.is_enabled = False
    bot.save(update_fields=["is_enabled"])
    # when
    reply = run(turn)
    # then
    turn.refresh_from_db()
    assert (reply, turn.status, turn.error) == (
        None,
        Turn.Status.FAILED,
        f"PermanentError: The bot {bot.slug} is disabled.",
    )
    assert llm_stub.requests == []


def test_t3_primary_input_is_system_prompt_context_then_the_new_prompt(llm_stub):
    # given: a chat thread with history; the new message's context excludes itself
    thread = ThreadFactory(bot=stub_bot(llm_stub, system_prompt="You are Tutu."))
    message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content="raw q1", prompt="rendered q1")
    message_create(thread=thread, kind=Message.Kind.AGENT_REPLY, content="a1")
    turn = rest_turn(thread, content="q2")
    # when
    run(turn)
    # then
    assert llm_stub.requests[0].json["messages"] == [
        {"role": "system", "content": "You are Tutu."},
        {"role": "user", "content": "rendered q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    turn.refresh_from_db()
    assert turn.model_input["request"]["messages"] == llm_stub.requests[0].json["messages"]
    assert turn.model_input["dropped_context_messages"] == 0


def test_t3_context_messages_are_the_newest_that_fit_the_models_window(llm_stub):
    # given: a window of 400 tokens, 100 output reserved; ten 200-char (54-token) older messages
    thread = ThreadFactory(bot=stub_bot(llm_stub, context_window=400, max_output_tokens=100, system_prompt=""))
    older = [
        message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content=f"{i}" + "x" * 199) for i in range(10)
    ]
    turn = rest_turn(thread, content="newest")
    # budget = 400 - 100 - estimate("newest") = 400 - 100 - 6 = 294 → five messages of 54 tokens (270)
    # when
    run(turn)
    # then
    sent = llm_stub.requests[0].json["messages"]
    assert [m["content"][0] for m in sent[:-1]] == ["5", "6", "7", "8", "9"]
    assert sent[-1] == {"role": "user", "content": "newest"}
    turn.refresh_from_db()
    assert turn.model_input["context_message_ids"] == [m.pk for m in older[5:]]
    assert turn.model_input["dropped_context_messages"] == 5


def test_t3_the_request_never_asks_for_more_output_than_the_window_leaves(llm_stub):
    """Input + requested output stay within the window: a model whose output cap exceeds a quarter of its
    window is asked for the quarter the context budget reserved (providers refuse input + max_tokens > window)."""
    # given: a 400-token window and an output cap of 1000; ten 54-token older messages
    thread = ThreadFactory(bot=stub_bot(llm_stub, context_window=400, max_output_tokens=1000, system_prompt=""))
    for i in range(10):
        message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content=f"{i}" + "x" * 199)
    turn = rest_turn(thread, content="newest")
    # when
    run(turn)
    # then: 100 (= 400 // 4) reserved and requested; the budget 400 - 100 - 6 = 294 keeps five messages
    sent = llm_stub.requests[0].json
    assert sent["max_tokens"] == 100
    assert [m["content"][0] for m in sent["messages"][:-1]] == ["5", "6", "7", "8", "9"]
    estimated_input = sum(estimate_tokens(m["content"]) for m in sent["messages"])
    assert estimated_input + sent["max_tokens"] <= 400


def test_t3_a_turn_loads_no_more_context_rows_than_could_fit_the_window(llm_stub):
    # given: a 40-token window fits at most 40 // 4 = 10 messages; the thread holds 30 short ones
    thread = ThreadFactory(bot=stub_bot(llm_stub, context_window=40, max_output_tokens=1, system_prompt=""))
    for i in range(30):
        message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content=f"m{i}")
    turn = rest_turn(thread, content="q")
    # when
    run(turn)
    # then: only the newest ten were read, so at most ten could be sent or counted as dropped
    turn.refresh_from_db()
    loaded = len(turn.model_input["context_message_ids"]) + turn.model_input["dropped_context_messages"]
    assert context_messages_upper_bound(context_window=40) == 10
    assert loaded == 10
    assert llm_stub.requests[0].json["messages"][-1] == {"role": "user", "content": "q"}


def test_p9_activation_contract_is_last_and_never_trimmed(llm_stub, scripted):
    # given: a window so small that no context fits, and a long contract
    contract = "HARD REQUIREMENT: send a message. " + "z" * 600
    bot = stub_bot(llm_stub, context_window=300, max_output_tokens=100, system_prompt="")
    thread = scripted(bot=bot, content="what now?", contract=contract)
    message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content="y" * 2000)
    turn, _ = turn_get_or_create(bot=thread.bot, thread=thread, trigger=Turn.Trigger.DISCUSS, source_message_id="om_d")
    # when
    run(turn)
    # then
    assert llm_stub.requests[0].json["messages"] == [
        {"role": "user", "content": "what now?"},
        {"role": "user", "content": contract},
    ]


def test_p9_empty_answer_is_retried_once_with_the_contract_restated(llm_stub, scripted):
    # given: the primary answers empty text first
    thread = scripted(bot=stub_bot(llm_stub, system_prompt=""), content="anyone?", contract="CONTRACT")
    turn, _ = turn_get_or_create(bot=thread.bot, thread=thread, trigger=Turn.Trigger.DISCUSS, source_message_id="om_e")
    llm_stub.enqueue(
        "openai_chat",
        StubResponse(body=openai_chat_body(text="", input_tokens=10, output_tokens=0)),
        StubResponse(body=openai_chat_body(text="Here is my take.", input_tokens=12, output_tokens=5)),
    )
    # when
    reply = run(turn)
    # then
    assert reply.content == "Here is my take."
    assert len(llm_stub.requests) == 2
    assert llm_stub.requests[1].json["messages"][-1] == {
        "role": "user",
        "content": f"{EMPTY_ANSWER_RETRY_NOTE}\nCONTRACT",
    }
    turn.refresh_from_db()
    assert (turn.usage["input_tokens"], turn.usage["output_tokens"]) == (22, 5)
    assert Message.objects.filter(kind=Message.Kind.AGENT_REPLY).count() == 1


def test_p9_still_empty_after_the_one_retry_sends_nothing(llm_stub, scripted):
    # given
    thread = scripted(bot=stub_bot(llm_stub, system_prompt=""), content="anyone?", contract="CONTRACT")
    turn, _ = turn_get_or_create(bot=thread.bot, thread=thread, trigger=Turn.Trigger.DISCUSS, source_message_id="om_f")
    llm_stub.respond_with("openai_chat", lambda request: StubResponse(body=openai_chat_body(text="")))
    # when
    reply = run(turn)
    # then: two calls, never a third, no reply
    assert reply is None
    assert len(llm_stub.requests) == 2
    turn.refresh_from_db()
    assert (turn.status, turn.error) == (Turn.Status.FAILED, "The model answered with no text.")
    assert not Message.objects.filter(kind=Message.Kind.AGENT_REPLY).exists()


def test_t1_local_rules_agent_shows_the_context_it_received():
    # given: the embedded default provider
    provider = ProviderFactory(kind=Provider.Kind.LOCAL_RULES)
    bot = BotFactory(primary_model=LLMModelFactory(provider=provider), system_prompt="You are Demo.")
    thread = ThreadFactory(bot=bot)
    message_create(thread=thread, kind=Message.Kind.USER_MESSAGE, content="first")
    message_create(thread=thread, kind=Message.Kind.AGENT_REPLY, content="ok")
    turn = rest_turn(thread, content="second")
    # when
    reply = run(turn)
    # then
    assert reply.content == f"{ECHO_LABEL} I received 2 context messages; you said: second"
