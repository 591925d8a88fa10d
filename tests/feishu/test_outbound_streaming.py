"""R3: the streaming card, through the real lark-oapi client against the local Feishu's CardKit: one card and
one reply per answer, strictly increasing sequences, at most 10 updates per second per card, the final card
text is the whole answer, a re-run resumes the same card, a refused card falls back to one plain reply, and
a new card takes over before the streaming limit."""

import copy
import json
import time

import pytest

from feishu.models import OutboundDelivery
from feishu.outbound import stream_throttle
from feishu.outbound.delivery import OutgoingText, delivery_uuid, plain_replies_send
from feishu.outbound.stream_state import StreamState
from feishu.outbound.streaming import StreamingCard

pytestmark = pytest.mark.django_db

CARD_ROUTES = ("card_content", "card_settings")
# The chat's send budget refills a token every ~0.22 s; waiting this long lets the next update through.
BUDGET_INTERVAL_SECONDS = 0.3
FALLBACK_PURPOSE = "stream-fallback"


def _card(bot, stored: list[dict], *, state: StreamState | None = None, **options) -> StreamingCard:
    def on_state(current: StreamState) -> None:
        stored.append(copy.deepcopy(current.as_dict()))

    def send_plain(text: str, state: StreamState) -> list[str]:  # as the turn's: delivery's chunk path
        return plain_replies_send(
            outgoing=OutgoingText(
                bot=bot,
                turn=None,
                chat_id="oc_group",
                reply_to_message_id="om_src",
                reply_in_thread=True,
                text=text,
                source_message_id="om_src",
                purpose=FALLBACK_PURPOSE,
                first_chunk_index=len(state.card_message_ids),
            )
        )

    return StreamingCard(
        bot=bot,
        chat_id="oc_group",
        reply_to_message_id="om_src",
        reply_in_thread=True,
        uuid_base="amux-answer-1",
        on_state=on_state,
        send_plain=send_plain,
        state=state,
        **options,
    )


def _shown(card: StreamingCard, text: str) -> None:
    """Feed `text` once the budget has a token again, so this update is really sent."""
    time.sleep(BUDGET_INTERVAL_SECONDS)
    card.update(text)


def _card_requests(stub, card_id: str):
    return [r for r in stub.requests if r.route in CARD_ROUTES and r.path.split("/")[5] == card_id]


def _answer(words: int) -> str:
    return " ".join(f"**w{n}**" if n % 7 == 0 else f"w{n}" for n in range(words))


def test_r3_a_streamed_answer_is_one_card_in_one_reply_ending_with_the_whole_text(feishu_stub, make_feishu_bot):
    # given: a fast model, a word every 2 ms
    bot = make_feishu_bot()
    stored: list[dict] = []
    card = _card(bot, stored, interval_ms=100)
    text = _answer(500)
    words = text.split(" ")
    # when
    for count in range(1, len(words) + 1):
        card.update(" ".join(words[:count]))
        time.sleep(0.002)
    state = card.finish(text)
    # then: one card, one reply carrying it, in the topic
    [create] = feishu_stub.accepted("card_create")
    assert json.loads(create.body["data"])["config"]["streaming_mode"] is True
    [reply] = feishu_stub.sent
    assert (reply["msg_type"], reply["reply_in_thread"], reply["uuid"]) == ("interactive", True, "amux-answer-1-c0")
    assert json.loads(reply["content"]) == {"type": "card", "data": {"card_id": state.card_id}}
    # sequences strictly increase, every call was accepted, the last one closed streaming
    calls = _card_requests(feishu_stub, state.card_id)
    sequences = [call.body["sequence"] for call in calls]
    assert sequences == sorted(set(sequences)) and len(calls) >= 4
    assert {(call.status, call.code) for call in calls} == {(200, 0)}
    assert calls[-1].route == "card_settings"
    assert feishu_stub.cards[state.card_id]["streaming"] is False
    assert feishu_stub.card_text(state.card_id) == text
    # the state was reported before each call and ends finished
    assert stored[-1] == {**state.as_dict(), "is_finished": True}
    assert (state.message_id, state.sequence) == (reply["message_id"], sequences[-1])


class FakeClock:
    """The throttle's clock, moved by the test (and by the controller's own waits): decisions, not wall time."""

    def __init__(self) -> None:
        self.value = 1_000.0

    def __call__(self) -> float:
        return self.value

    def sleep(self, seconds: float) -> None:
        self.value += seconds


def test_r3_updates_per_second_per_card_stay_at_most_10_under_a_fast_producer_with_an_idle_budget(
    feishu_stub, make_feishu_bot, mocker
):
    # given: the budget never says no, the throttle alone keeps the pace; a character every millisecond of a
    # clock the test moves (1.5 s of it), so what is measured is the throttle's decisions, not the machine's speed
    mocker.patch("feishu.outbound.stream_throttle.send_budget_try", return_value=True)
    # the stub's per-card limit counts wall-clock arrivals, which a moved clock compresses: the gaps are asserted
    # on the controller's own clock instead (with the real clock they are the same gaps in real time)
    feishu_stub.rate_limits_enabled = False
    bot = make_feishu_bot()
    clock = FakeClock()
    card = _card(bot, [], interval_ms=0, update_chars=1, monotonic=clock, sleep=clock.sleep)
    text = "x" * 1500
    pushed_at: list[float] = []  # the clock when each card update was sent
    # when
    for count in range(1, len(text) + 1):
        before = len(feishu_stub.requests_to("card_content"))
        card.update(text[:count])
        pushed_at += [clock()] * (len(feishu_stub.requests_to("card_content")) - before)
        clock.sleep(0.001)
    state = card.finish(text)
    # then: never two updates closer than 120 ms of the clock (so at most 9 in any second, Feishu allows 10),
    # and none held back longer than that (plus the producer's 1 ms step): it streamed at that pace
    gaps = [later - earlier for earlier, later in zip(pushed_at, pushed_at[1:], strict=False)]
    assert min(gaps) >= stream_throttle.MIN_UPDATE_GAP_SECONDS - 1e-9
    assert max(gaps) <= stream_throttle.MIN_UPDATE_GAP_SECONDS + 0.001 + 1e-9
    assert len(pushed_at) >= 1.5 // (stream_throttle.MIN_UPDATE_GAP_SECONDS + 0.001)
    # the sequences count up one per call, every call was accepted, the card ends with the whole text
    calls = _card_requests(feishu_stub, state.card_id)
    assert [call.body["sequence"] for call in calls] == list(range(1, len(calls) + 1))
    assert [c.status for c in calls] == [200] * len(calls)
    assert feishu_stub.card_text(state.card_id) == text


def test_r3_the_card_is_created_at_the_first_text_with_it_so_the_reply_shows_content_at_once(
    feishu_stub, make_feishu_bot
):
    # given: a card whose model has not written anything yet
    bot = make_feishu_bot()
    stored: list[dict] = []
    card = _card(bot, stored)
    # when: an empty delta (a stream's role-only first chunk), then the first words
    card.update("")
    assert feishu_stub.requests == []  # no empty card waits for the model
    card.update("The first words")
    # then: the card was created holding them, before the reply that carries it; no content update was needed
    [create] = feishu_stub.accepted("card_create")
    [reply] = feishu_stub.requests_to("reply")
    assert create.at < reply.at
    assert json.loads(create.body["data"])["body"]["elements"][0]["content"] == "The first words"
    assert feishu_stub.requests_to("card_content") == []
    [sent] = feishu_stub.sent
    assert feishu_stub.message_text(sent) == "The first words"
    # the text the card holds was stored with its id, before the reply: a re-run knows what it shows
    card_stored = next(snapshot for snapshot in stored if snapshot["card_id"])
    assert (card_stored["shown"], card_stored["sequence"], card_stored["message_id"]) == ("The first words", 0, "")
    # and an answer that was all there at the first text needs no content update at all, only the close
    state = card.finish("The first words")
    assert feishu_stub.requests_to("card_content") == []
    assert [c.route for c in _card_requests(feishu_stub, state.card_id)] == ["card_settings"]
    assert feishu_stub.card_text(state.card_id) == "The first words"


def test_r3_a_first_text_longer_than_a_card_starts_the_card_empty_and_rolls_over(feishu_stub, make_feishu_bot):
    # given: the first text the card sees is already more than one card holds (a re-run after a long stream)
    bot = make_feishu_bot()
    card = _card(bot, [], card_chars=100)
    text = "\n\n".join(f"Paragraph {n} " + "w" * 30 for n in range(6))
    # when
    card.update(text)
    state = card.finish(text)
    # then: no card was created with more than it holds, and the cards together show the whole text once
    for create in feishu_stub.accepted("card_create"):
        assert len(json.loads(create.body["data"])["body"]["elements"][0]["content"]) <= 100
    texts = [feishu_stub.card_text(card_id) for card_id in [c["card_id"] for c in state.closed_cards] + [state.card_id]]
    assert all(len(shown) <= 100 for shown in texts)
    assert "\n\n".join(texts) == text
    assert len(feishu_stub.sent) == len(texts) >= 2


def test_r3_a_rerun_from_the_stored_state_continues_on_the_same_card(feishu_stub, make_feishu_bot):
    # given: a worker streamed part of the answer, stored its state, then died
    bot = make_feishu_bot()
    stored: list[dict] = []
    first = _card(bot, stored)
    first.update("The answer begins")
    _shown(first, "The answer begins")
    crashed_at = StreamState.from_dict(stored[-1])
    # when: the re-run streams the answer again and finishes it
    second = _card(bot, stored, state=crashed_at)
    second.update("The answer begins")
    _shown(second, "The answer begins and goes on")
    state = second.finish("The answer begins and goes on to the end.")
    # then: still one card and one reply; sequences increase across both runs
    assert len(feishu_stub.accepted("card_create")) == 1
    assert len(feishu_stub.sent) == 1
    assert state.card_id == crashed_at.card_id and state.message_id == crashed_at.message_id
    sequences = [call.body["sequence"] for call in _card_requests(feishu_stub, state.card_id)]
    assert sequences == sorted(set(sequences))
    assert feishu_stub.card_text(state.card_id) == "The answer begins and goes on to the end."


def test_r3_a_crash_between_the_reply_and_storing_its_id_posts_no_second_reply(feishu_stub, make_feishu_bot):
    # given: the card id was stored, the reply went out, the worker died before storing the reply's id
    bot = make_feishu_bot()
    stored: list[dict] = []
    _card(bot, stored).update("Hello")
    card_stored = next(snapshot for snapshot in stored if snapshot["card_id"] and not snapshot["message_id"])
    [first_reply] = feishu_stub.sent
    # when
    state = _card(bot, [], state=StreamState.from_dict(card_stored)).finish("Hello world")
    # then: the reply was asked again with the same uuid and Feishu posted nothing new
    assert len(feishu_stub.requests_to("reply")) == 2
    assert feishu_stub.sent == [first_reply]
    assert state.message_id == first_reply["message_id"]
    assert feishu_stub.card_text(state.card_id) == "Hello world"


def test_r3_a_refused_card_falls_back_to_one_plain_reply_with_the_whole_text(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    feishu_stub.fail_next("card_create", status=400, code=300100, msg="card refused")
    stored: list[dict] = []
    card = _card(bot, stored)
    # when
    card.update("Partial")
    card.update("Partial answer")
    state = card.finish("Partial answer, complete.")
    # then
    assert len(feishu_stub.requests_to("card_create")) == 1  # not retried per update
    [reply] = feishu_stub.sent
    assert (reply["msg_type"], json.loads(reply["content"]), reply["uuid"]) == (
        "text",
        {"text": "Partial answer, complete."},
        delivery_uuid(bot=bot, source_message_id="om_src", purpose=FALLBACK_PURPOSE, chunk_index=0),
    )
    assert (state.is_fallback, state.is_finished, state.fallback_message_ids) == (True, True, [reply["message_id"]])
    # sent through delivery's chunk path: its row, written before the send, says so
    [row] = OutboundDelivery.objects.all()
    assert (row.status, row.msg_type, row.content, row.feishu_message_id) == (
        "sent",
        "text",
        "Partial answer, complete.",
        reply["message_id"],
    )
    # and a re-run of the finished answer sends nothing more
    before = len(feishu_stub.requests)
    _card(bot, [], state=StreamState.from_dict(stored[-1])).finish("Partial answer, complete.")
    assert len(feishu_stub.requests) == before


def test_r3_a_refused_update_falls_back_to_one_plain_reply_after_the_card(feishu_stub, make_feishu_bot):
    # given: the card and its reply went out, then Feishu refuses an update
    bot = make_feishu_bot()
    card = _card(bot, [])
    card.update("Start")
    feishu_stub.fail_next("card_content", status=400, code=230099, msg="card content failed")
    _shown(card, "Start of it")
    # when
    state = card.finish("Start of it, and the end.")
    # then: no further card calls, one plain reply with everything
    assert len(feishu_stub.requests_to("card_content")) == 1
    interactive, plain = feishu_stub.sent
    assert interactive["msg_type"] == "interactive"
    assert (plain["msg_type"], json.loads(plain["content"])) == ("text", {"text": "Start of it, and the end."})
    assert state.is_fallback is True


def test_r3_a_new_card_takes_over_before_the_streaming_limit(feishu_stub, make_feishu_bot):
    # given: a card limit of 60 s on a clock the test moves
    bot = make_feishu_bot()
    clock = [1_000.0]
    card = _card(bot, [], card_seconds=60, now=lambda: clock[0])
    first_part = "## Part one\n\nThe first half."
    # when
    _shown(card, first_part)
    clock[0] += 61
    _shown(card, first_part + "\n\n## Part two")
    state = card.finish(first_part + "\n\n## Part two\n\nThe second half.")
    # then: two cards, two replies (own uuids), the first closed with what it had, the second with the rest
    first_id, second_id = (call_card["card_id"] for call_card in [*state.closed_cards, {"card_id": state.card_id}])
    assert [m["uuid"] for m in feishu_stub.sent] == ["amux-answer-1-c0", "amux-answer-1-c1"]
    assert feishu_stub.card_text(first_id) == first_part + "\n\n## Part two"
    assert feishu_stub.card_text(second_id) == "The second half."
    assert [feishu_stub.cards[i]["streaming"] for i in (first_id, second_id)] == [False, False]
    assert state.message_ids == [m["message_id"] for m in feishu_stub.sent]


def test_r3_a_card_closed_inside_a_code_fence_closes_it_and_the_next_card_reopens_it(feishu_stub, make_feishu_bot):
    # given
    bot = make_feishu_bot()
    clock = [1_000.0]
    card = _card(bot, [], card_seconds=60, now=lambda: clock[0])
    head = "Code:\n\n```python\nx = 1"
    # when
    _shown(card, head)
    clock[0] += 61
    _shown(card, head + "\ny = 2")
    state = card.finish(head + "\ny = 2\nz = 3\n```\n\nDone.")
    # then
    [closed] = state.closed_cards
    assert feishu_stub.card_text(closed["card_id"]) == head + "\ny = 2\n```"
    assert feishu_stub.card_text(state.card_id) == "```python\nz = 3\n```\n\nDone."


def test_r3_when_feishu_ends_streaming_first_the_answer_continues_in_a_new_card(feishu_stub, make_feishu_bot):
    # given: the local Feishu's streaming limit shortened to half a second
    bot = make_feishu_bot()
    feishu_stub.streaming_limit_seconds = 0.5
    card = _card(bot, [])
    card.update("Before the limit.")  # the card and its reply
    _shown(card, "Before the limit.")
    time.sleep(0.6)
    # when
    card.update("Before the limit. After it.")
    state = card.finish("Before the limit. After it. The end.")
    # then: the old card keeps what it showed; nothing is lost or shown twice
    [closed] = state.closed_cards
    assert feishu_stub.card_text(closed["card_id"]) == "Before the limit."
    assert feishu_stub.card_text(state.card_id) == " After it. The end."
    assert len(feishu_stub.sent) == 2
