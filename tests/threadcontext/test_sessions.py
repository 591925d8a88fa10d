"""Session bookkeeping (C8 topic_root_prompt_delivered, C14 scopes and retirement)."""

from __future__ import annotations

import itertools

import pytest

from tests.threadcontext.conftest import CHAT_ID, ROOT_ID
from threadcontext.models import SessionBinding, Workspace
from threadcontext.services import (
    session_binding_get_or_create,
    session_binding_mark_topic_root_delivered,
    session_binding_retire,
    session_scope_key,
)

pytestmark = pytest.mark.django_db

_thread_ids = itertools.count(100)


def new_thread() -> int:
    return next(_thread_ids)


def get_or_create(scope_key: str = ROOT_ID):
    return session_binding_get_or_create(
        bot_profile="coder", chat_id=CHAT_ID, scope_key=scope_key, create_agent_thread=new_thread
    )


def test_c8_a_new_session_starts_with_the_root_undelivered_and_is_reused():
    first = get_or_create()
    again = get_or_create()
    assert (first.created, first.binding.topic_root_prompt_delivered) == (True, False)
    assert (again.created, again.binding.pk) == (False, first.binding.pk)


def test_c8_delivered_is_set_only_by_the_after_submit_call():
    binding = get_or_create().binding
    # a failed submit: nothing is called, the next input still injects the root
    assert SessionBinding.objects.get(pk=binding.pk).topic_root_prompt_delivered is False
    assert session_binding_mark_topic_root_delivered(binding_id=binding.pk) is True
    assert SessionBinding.objects.get(pk=binding.pk).topic_root_prompt_delivered is True


def test_c8_a_new_session_resets_delivered():
    group_binding = get_or_create(SessionBinding.GROUP_SCOPE_KEY).binding
    session_binding_mark_topic_root_delivered(binding_id=group_binding.pk)
    session_binding_retire(bot_profile="coder", chat_id=CHAT_ID, scope_key=SessionBinding.GROUP_SCOPE_KEY)
    renewed = get_or_create(SessionBinding.GROUP_SCOPE_KEY)
    assert renewed.created is True
    assert renewed.binding.pk != group_binding.pk
    assert renewed.binding.topic_root_prompt_delivered is False
    assert renewed.binding.agent_thread_id != group_binding.agent_thread_id


def test_c8_a_retired_binding_cannot_be_marked_delivered():
    binding = get_or_create().binding
    session_binding_retire(bot_profile="coder", chat_id=CHAT_ID, scope_key=ROOT_ID)
    assert session_binding_mark_topic_root_delivered(binding_id=binding.pk) is False


def test_c14_a_retired_topic_session_answers_as_a_retired_entry_and_creates_nothing():
    binding = get_or_create().binding
    retired = session_binding_retire(bot_profile="coder", chat_id=CHAT_ID, scope_key=ROOT_ID)
    result = get_or_create()
    assert retired.pk == binding.pk
    assert (result.is_retired_entry, result.created, result.binding.pk) == (True, False, binding.pk)
    assert SessionBinding.objects.count() == 1


def test_c14_group_scope_uses_one_key_for_every_topic():
    assert session_scope_key(session_scope=Workspace.SessionScope.GROUP, root_msg_id="om_a") == "group"
    assert session_scope_key(session_scope=Workspace.SessionScope.TOPIC, root_msg_id="om_a") == "om_a"


def test_c14_retiring_without_a_live_binding_returns_none():
    assert session_binding_retire(bot_profile="coder", chat_id=CHAT_ID, scope_key="om_none") is None


def test_c8_a_lost_race_returns_the_winners_binding_and_rolls_back_the_losers_thread(mocker):
    # given: the winner's binding is committed after this request looked for a live one and found none
    winner = SessionBinding.objects.create(bot_profile="coder", chat_id=CHAT_ID, scope_key=ROOT_ID, agent_thread_id=1)
    mocker.patch("threadcontext.services.sessions._live_binding", return_value=None)

    def create_agent_thread() -> int:
        # stands in for agents.Thread creation: a row written inside the same savepoint
        return Workspace.objects.create(bot_profile="loser-thread", chat_id=CHAT_ID).pk

    # when
    result = session_binding_get_or_create(
        bot_profile="coder", chat_id=CHAT_ID, scope_key=ROOT_ID, create_agent_thread=create_agent_thread
    )
    # then: the winner's binding, and the loser's "thread" row was rolled back with its binding insert
    assert (result.created, result.binding.pk) == (False, winner.pk)
    assert SessionBinding.objects.count() == 1
    assert Workspace.objects.filter(bot_profile="loser-thread").exists() is False
