"""Three quick messages to one conversation, its turns spread over two real worker processes (issue 22,
ARCHITECTURE §11.1 O1-O4): the scenario and its checks, shared by the PostgreSQL + Redis tests
(tests/feishu/test_conversation_workers.py) and the embedded default's (tests/agents/test_conversation_embedded.py).

Each worker runs one task at a time (the solo pool; acks_late with a prefetch of one), so while one holds the
first turn in its model call, the later messages' turns go to the other process. The LLM stub (in the test
process) holds the first answer until the test has seen both later turns deferred there (their worker logs "turn
waits for its conversation"): every run proves the exclusion across processes instead of hoping for a race, and
needs no long model delay. Then the stub answers, each request with the questions it holds.
"""

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from agents.tools.loop import STEERED_HEADER
from tests.helpers import wait_for
from tests.stubs.llm_servers import LLMStubServer, RecordedRequest, StubResponse, openai_chat_body

QUESTIONS = ("draft a plan in three steps", "now list the risks", "and a timeline")
GAP_SECONDS = 0.3  # between the quick messages
MODEL_SECONDS = 0.2  # every answer but the held one
HOLD_SECONDS = 30  # the held answer comes back when the test releases it, at the latest after this
WAIT_SECONDS = 60
DEFERRED_LINE = "turn waits for its conversation"  # agents/services/turns/conversation.py
TURN_TASK_LINE = "agents.tasks.turn_run_task["  # Celery's "Task ...[id] received"
# A turn's final statuses: a failed one ends the wait at once, and the checks then say which turn failed.
FINAL_STATUSES = ("delivered", "skipped", "failed", "delivery_failed")
STEER_TOOL = "stub__echo"  # the MCP stub's echo tool (tests/stubs/mcp_server.py), as the model names it


def answer_to(*questions: str) -> str:
    return "answer to: " + " + ".join(questions)


def asked(content: str) -> list[str]:
    """The questions a text holds (a model input's message: a collected turn's holds several), in its order."""
    return sorted((question for question in QUESTIONS if question in content), key=content.index)


class HeldModel:
    """The LLM stub's openai_chat answers: `answer to: <the questions the last message holds>`; the first `held`
    requests wait for `release` (the first turn is mid-call while the test sends the others)."""

    def __init__(self, stub: LLMStubServer, *, held: int = 1) -> None:
        self.release = threading.Event()
        self.held, self.calls = held, 0
        self._lock = threading.Lock()
        stub.respond_with("openai_chat", self)

    def __call__(self, request: RecordedRequest) -> StubResponse:
        with self._lock:
            self.calls += 1
            is_held = self.calls <= self.held
        if is_held:
            self.release.wait(timeout=HOLD_SECONDS)
        text = answer_to(*asked(request.json["messages"][-1]["content"]))
        return StubResponse(body=openai_chat_body(text=text), delay_seconds=MODEL_SECONDS)


def tool_then_answer(release: threading.Event, *, answer: str) -> Callable[[RecordedRequest], StubResponse]:
    """An openai_chat responder for queue mode steer in one process: the request with no tool result yet waits for
    `release`, then asks for the MCP stub's `echo` tool; the request after the tool's result gets `answer`."""

    def respond(request: RecordedRequest) -> StubResponse:
        if not any(message["role"] == "tool" for message in request.json["messages"]):
            release.wait(timeout=HOLD_SECONDS)
            return StubResponse(body=openai_chat_body(tool_calls=[(STEER_TOOL, {"text": "notes"})]))
        return StubResponse(body=openai_chat_body(text=answer))

    return respond


class ToolHeldModel:
    """For queue mode steer: the first request (no tool result yet) is held until `release`, then asks for the MCP
    stub's `echo` tool; the request after the tool's result is answered with every question its input holds."""

    def __init__(self, stub: LLMStubServer) -> None:
        self.release = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()
        stub.respond_with("openai_chat", self)

    def __call__(self, request: RecordedRequest) -> StubResponse:
        with self._lock:
            self.calls += 1
        messages = request.json["messages"]
        if not any(message["role"] == "tool" for message in messages):
            self.release.wait(timeout=HOLD_SECONDS)
            return StubResponse(body=openai_chat_body(tool_calls=[(STEER_TOOL, {"text": "notes"})]))
        text = answer_to(*asked("\n".join(str(message.get("content") or "") for message in messages)))
        return StubResponse(body=openai_chat_body(text=text), delay_seconds=MODEL_SECONDS)


def assert_steered_into_the_first_turn(stub: LLMStubServer) -> None:
    """Steer: two model calls, the first before the later messages (it asks for the tool), the second holding the
    tool's result and then each later message, marked as sent during the work, in order."""
    first, second = model_inputs(stub)
    assert asked("\n".join(content for _, content in first)) == [QUESTIONS[0]]
    roles = [role for role, _ in second]
    tool_at = roles.index("tool")
    steered = second[tool_at + 1 :]
    assert [role for role, _ in steered] == ["user", "user"], second
    assert [asked(content) for _, content in steered] == [[QUESTIONS[1]], [QUESTIONS[2]]]
    assert all(content.startswith(STEERED_HEADER) for _, content in steered)


class LoggingProcess(Protocol):
    log_path: Path


class WorkerLogs:
    """What two worker processes logged since this was made (their log files only grow)."""

    def __init__(self, workers: Sequence[LoggingProcess]) -> None:
        self.workers = list(workers)
        self.offsets = [worker.log_path.stat().st_size if worker.log_path.exists() else 0 for worker in workers]

    def texts(self) -> list[str]:
        return [w.log_path.read_text(errors="replace")[o:] for w, o in zip(self.workers, self.offsets, strict=True)]

    def counts(self, line: str) -> list[int]:
        return [text.count(line) for text in self.texts()]

    def log_tail(self, lines: int = 60) -> str:  # tests.helpers.HasLogTail
        tails = ["\n".join(text.splitlines()[-lines:]) for text in self.texts()]
        return "\n".join(f"--- {w.log_path}:\n{tail}" for w, tail in zip(self.workers, tails, strict=True))


def send_three_quickly(
    send: Callable[[int, str], Any], *, model: HeldModel | ToolHeldModel, logs: WorkerLogs
) -> list[Any]:
    """Send the first question; while its model call is held, the two others GAP_SECONDS apart; wait until the
    other worker deferred both later turns; then let the model answer. What `send(number, question)` returned."""
    sent = [send(1, QUESTIONS[0])]
    wait_for(lambda: model.calls, what="the first model call", timeout=WAIT_SECONDS, worker=logs)
    for number, question in enumerate(QUESTIONS[1:], start=2):
        time.sleep(GAP_SECONDS)
        sent.append(send(number, question))
    wait_for(lambda: sum(logs.counts(DEFERRED_LINE)) >= 2, what="both later turns deferred", worker=logs)
    # the later turns found their conversation busy in the other process, and made no model call
    assert model.calls == 1
    assert sorted(logs.counts(DEFERRED_LINE)) == [0, 2], logs.log_tail()
    model.release.set()
    return sent


def assert_spread_over_both_workers(logs: WorkerLogs) -> None:
    assert all(logs.counts(TURN_TASK_LINE)), f"turns ran in one worker only:\n{logs.log_tail()}"


def assert_never_overlapped(spans: list[tuple[float, float]]) -> None:
    ordered = sorted(spans)
    for (_, end), (start, _) in zip(ordered, ordered[1:], strict=False):
        assert start >= end, f"model calls of one conversation overlapped: {ordered}"


def model_inputs(stub: LLMStubServer) -> list[list[tuple[str, str]]]:
    return [[(m["role"], m["content"]) for m in r.json["messages"]] for r in stub.requests_for("openai_chat")]


def assert_each_input_holds_the_earlier_answers(stub: LLMStubServer, *, answered: list[list[str]]) -> None:
    """`answered[k]`: the questions model call k answers. Each call's input ends with its own question(s) and
    holds every earlier answer, in order, before them; nothing of a later question."""
    inputs = model_inputs(stub)
    assert [asked(messages[-1][1]) for messages in inputs] == answered, inputs
    for number, messages in enumerate(inputs):
        answers = [content for role, content in messages if role == "assistant"]
        assert answers == [answer_to(*questions) for questions in answered[:number]], messages
        later = [question for questions in answered[number + 1 :] for question in questions]
        assert not any(question in content for question in later for _, content in messages), messages


# --- a REST thread -------------------------------------------------------------------------------------------
class Rest(Protocol):
    """The hub's REST API as the owner's token sees it: (status, JSON body) of one request."""

    def __call__(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]: ...


def rest_post(rest: Rest, *, thread_id: int, text: str) -> int:
    status, body = rest("post", f"/api/v1/threads/{thread_id}/messages/", {"content": text})
    assert status == 202, body
    return body["turn_id"]


def rest_turns(rest: Rest, turn_ids: list[int]) -> list[dict]:
    return [rest("get", f"/api/v1/turns/{turn_id}/")[1] for turn_id in turn_ids]


def rest_finished(rest: Rest, turn_ids: list[int], *, logs: WorkerLogs) -> list[dict]:
    def finished() -> list[dict]:
        turns = rest_turns(rest, turn_ids)
        return turns if all(turn["status"] in FINAL_STATUSES for turn in turns) else []

    return wait_for(finished, what="every turn finished", timeout=WAIT_SECONDS, worker=logs)


def rest_three_quickly(rest: Rest, *, thread_id: int, model: HeldModel | ToolHeldModel, logs: WorkerLogs) -> list[int]:
    turn_ids = send_three_quickly(
        lambda _, text: rest_post(rest, thread_id=thread_id, text=text), model=model, logs=logs
    )
    rest_finished(rest, turn_ids, logs=logs)
    return turn_ids


def assert_rest_conversation(
    rest: Rest, stub: LLMStubServer, *, thread_id: int, turn_ids: list[int], queue_mode: str, logs: WorkerLogs
) -> None:
    """O1-O3 on a REST thread after `rest_three_quickly`: one model call at a time, answers in order, every message
    answered once (collect: the two waiting ones by one reply; steer, its bot using a tool: all three by the first
    turn's reply), each input holding the earlier answers."""
    assert_spread_over_both_workers(logs)
    assert_never_overlapped(stub.spans)
    turns = rest_turns(rest, turn_ids)
    if queue_mode == "steer":
        answered = [list(QUESTIONS)]
        assert [turn["status"] for turn in turns] == ["delivered", "skipped", "skipped"]
        assert [turn["answered_by"] for turn in turns] == [None, turn_ids[0], turn_ids[0]]
        assert turns[0]["answers_also"] == turn_ids[1:]
    elif queue_mode == "followup":
        answered = [[question] for question in QUESTIONS]
        assert [turn["status"] for turn in turns] == ["delivered"] * 3
    else:
        answered = [[QUESTIONS[0]], list(QUESTIONS[1:])]
        assert [turn["status"] for turn in turns] == ["delivered", "delivered", "skipped"]
        assert (turns[2]["answered_by"], turns[1]["answers_also"]) == (turn_ids[1], [turn_ids[2]])
    replies = [turn["reply"] for turn in turns[: len(answered)]]
    assert [reply["content"] for reply in replies] == [answer_to(*questions) for questions in answered]
    assert [reply["id"] for reply in replies] == sorted(reply["id"] for reply in replies)
    # each message answered once: the thread holds these replies and no other
    history = rest("get", f"/api/v1/threads/{thread_id}/history/")[1]["results"]
    assert sorted(m["id"] for m in history if m["kind"] == "agent_reply") == [reply["id"] for reply in replies]
    if queue_mode == "steer":
        assert_steered_into_the_first_turn(stub)
        return
    assert_each_input_holds_the_earlier_answers(stub, answered=answered)
    # and the last input is the thread as people saw it: each answer right after its question
    tail = [("user", QUESTIONS[0]), ("assistant", answer_to(QUESTIONS[0]))]
    if queue_mode == "followup":
        tail += [("user", QUESTIONS[1]), ("assistant", answer_to(QUESTIONS[1])), ("user", QUESTIONS[2])]
    else:
        tail += [("user", f"{QUESTIONS[1]}\n\n{QUESTIONS[2]}")]
    assert model_inputs(stub)[-1][-len(tail) :] == tail


def model_for(stub: LLMStubServer, *, queue_mode: str) -> HeldModel | ToolHeldModel:
    """The LLM stub's behaviour for a queue mode's scenario: steer's bot uses a tool, the others answer."""
    return ToolHeldModel(stub) if queue_mode == "steer" else HeldModel(stub)


def assert_rest_conversations_run_side_by_side(
    rest: Rest, stub: LLMStubServer, *, thread_ids: list[int], logs: WorkerLogs
) -> None:
    """Two threads: both first model calls are held until both are with the model, so they can only both be
    answered if the two conversations ran at once (in the two processes)."""
    model = HeldModel(stub, held=2)
    turn_ids = [rest_post(rest, thread_id=thread_id, text=QUESTIONS[0]) for thread_id in thread_ids]
    wait_for(lambda: model.calls == 2, what="both conversations with the model at once", timeout=20, worker=logs)
    model.release.set()
    turns = rest_finished(rest, turn_ids, logs=logs)
    assert [turn["status"] for turn in turns] == ["delivered", "delivered"]
    (_, first_end), (second_start, _) = sorted(stub.spans)
    assert second_start < first_end  # their model calls overlapped
    assert_spread_over_both_workers(logs)
