"""C4 as a property: whatever Feishu sends (mention keys in the message, in the quoted message read online, in the
topic root fetched online), no `@_user_N` key reaches a prompt, a context decision or a stored context item."""

import json
import secrets

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.models import Turn
from feishu.inbound.signing import mention_entry, message_event_payload
from tests.feishu.conftest import bot_open_id
from threadcontext.models import ThreadContextDecision, ThreadContextItem, Workspace

pytestmark = pytest.mark.django_db

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
words = st.lists(st.sampled_from(["deploy", "please", "的", "now", "fix", "@all", "ok"]), min_size=0, max_size=4)


def keyed(people: list[str], filler: list[str], *, first: int = 1) -> tuple[str, list[dict]]:
    """A Feishu text whose people are written as `@_user_N` keys, and its mentions array."""
    parts, mentions = [], []
    for offset, name in enumerate(people):
        key = f"@_user_{first + offset}"
        parts.append(key)
        mentions.append({"key": key, "id": f"ou_{name}", "name": name.title()})
    return " ".join([*parts, *filler]), mentions


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    people=st.lists(names, min_size=1, max_size=3),
    quoted_people=st.lists(names, min_size=1, max_size=3),
    root_people=st.lists(names, min_size=1, max_size=2),
    filler=words,
)
def test_c4_no_mention_key_in_any_prompt_decision_or_stored_item(
    feishu, make_feishu_bot, people, quoted_people, root_people, filler
):
    # given: a group topic whose root and quoted message (both only online) carry mention keys
    bot = make_feishu_bot()
    chat_id = "oc_" + secrets.token_hex(4)
    Workspace.objects.create(bot_profile=bot.slug, chat_id=chat_id)
    root_text, root_mentions = keyed(root_people, ["root", *filler])
    feishu.stub.add_message(message_id=f"{chat_id}_root", text=root_text, chat_id=chat_id)
    feishu.stub.messages[f"{chat_id}_root"]["mentions"] = root_mentions
    quoted_text, quoted_mentions = keyed(quoted_people, filler)
    feishu.stub.add_message(
        message_id=f"{chat_id}_q", text=quoted_text or "x", chat_id=chat_id, root_id=f"{chat_id}_root"
    )
    feishu.stub.messages[f"{chat_id}_q"]["mentions"] = quoted_mentions
    # when: someone replies to the quoted message, @-ing the bot and other people
    text, mentions = keyed(people, filler, first=2)
    payload = message_event_payload(
        verification_token=bot.feishu_verification_token,
        app_id=bot.feishu_app_id,
        message_id=f"{chat_id}_ask",
        chat_id=chat_id,
        text="@_user_1 " + text,
        root_id=f"{chat_id}_root",
        parent_id=f"{chat_id}_q",
        thread_id=f"omt_{chat_id}",
        mentions=[
            mention_entry(index=1, open_id=bot_open_id(bot), name=bot.name),
            *[mention_entry(index=i, open_id=m["id"], name=m["name"]) for i, m in enumerate(mentions, start=2)],
        ],
    )
    feishu.post(bot, payload)
    # then
    turn = Turn.objects.get(bot=bot)
    seen = [
        turn.user_message.content if turn.user_message else "",
        turn.user_message.prompt if turn.user_message else "",
        json.dumps(turn.model_input, ensure_ascii=False),
        *ThreadContextDecision.objects.filter(chat_id=chat_id).values_list("prompt_preview", "request_text"),
        *ThreadContextItem.objects.filter(chat_id=chat_id).values_list("text", flat=True),
    ]
    flat = json.dumps(seen, ensure_ascii=False)
    assert turn.status == "delivered"
    assert "@_user_" not in flat
