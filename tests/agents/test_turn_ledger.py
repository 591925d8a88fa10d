"""The ledger's writes keep the run's Turn current without re-reading it, and still keep one record when two runs
of one turn race (issue 11: the re-reads between steps were cut)."""

import pytest

from agents.models import Message, Thread, Turn
from agents.services.turns import turn_get_or_create
from agents.services.turns.ledger import turn_channel_state_add, turn_channel_state_merge, turn_prepared_store
from tests.agents.factories import ThreadFactory

pytestmark = pytest.mark.django_db


def _turn(*, channel_state: dict | None = None) -> Turn:
    thread = ThreadFactory(channel=Thread.Channel.REST)
    turn, _ = turn_get_or_create(bot=thread.bot, thread=thread, trigger=Turn.Trigger.REST, source_message_id="rest:1")
    if channel_state is not None:
        Turn.objects.filter(pk=turn.pk).update(channel_state=channel_state)
    return Turn.objects.select_related("thread", "bot").get(pk=turn.pk)


def test_a_merged_note_keeps_every_other_key_even_one_another_run_wrote_meanwhile():
    # given: two runs' views of one turn, both read before either wrote
    ours = _turn(channel_state={"binding_id": 7, "stream": {"sequence": 1}})
    theirs = Turn.objects.get(pk=ours.pk)
    turn_channel_state_merge(turn=theirs, values={"receipt": {"emoji": "OnIt", "reaction_id": "r1"}})
    # when
    merged = turn_channel_state_merge(turn=ours, values={"stream": {"sequence": 2, "card_id": "c1"}})
    # then: the database holds both runs' notes, the replaced key whole; our view holds what we wrote
    assert Turn.objects.get(pk=ours.pk).channel_state == {
        "binding_id": 7,
        "stream": {"sequence": 2, "card_id": "c1"},
        "receipt": {"emoji": "OnIt", "reaction_id": "r1"},
    }
    assert merged == ours.channel_state == {"binding_id": 7, "stream": {"sequence": 2, "card_id": "c1"}}


def test_a_note_is_added_only_by_the_first_run_and_the_second_sees_it():
    # given: two runs' views of one turn without a receipt note
    first = _turn(channel_state={"binding_id": 7})
    second = Turn.objects.get(pk=first.pk)
    note = {"emoji": "OnIt", "reaction_id": "", "removed": False}
    # when
    added_first = turn_channel_state_add(turn=first, key="receipt", value=note)
    added_second = turn_channel_state_add(turn=second, key="receipt", value={**note, "emoji": "Other"})
    # then: one note, the first's; the second run now sees it (and so never asks Feishu for a second reaction)
    assert (added_first, added_second) == (True, False)
    assert Turn.objects.get(pk=first.pk).channel_state == {"binding_id": 7, "receipt": note}
    assert second.channel_state == {"binding_id": 7, "receipt": note}


def test_racing_prepares_keep_one_user_message_and_the_loser_gets_the_winners_record():
    # given: two runs of one turn that both found it unprepared
    winner = _turn()
    loser = Turn.objects.select_related("thread", "bot").get(pk=winner.pk)
    # when
    won = turn_prepared_store(
        turn=winner, content="first", prompt="", author="a", context_decision_id=None, channel_state={"x": 1}
    )
    lost = turn_prepared_store(
        turn=loser, content="second", prompt="", author="b", context_decision_id=None, channel_state={"x": 2}
    )
    # then: one user message, the winner's, and both runs go on with it
    assert list(Message.objects.values_list("content", flat=True)) == ["first"]
    assert won is winner and winner.user_message.content == "first" and winner.channel_state == {"x": 1}
    assert lost.user_message.content == "first" and lost.channel_state == {"x": 1}
