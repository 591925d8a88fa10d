"""Issue 30, finding 5: context decisions, workspaces, wakes and judgements belong to their bot, not to its slug.

Owner B's bot answers in a group through the real webhook (a decision, a workspace and a session are written);
B's bot is deleted through the admin; owner A then creates a bot with the same slug. A sees none of B's records
through the REST API or the admin. A renamed bot keeps its records under its new slug.
"""

import pytest
from django.test import Client
from django.utils import timezone

from feishu.models import DiscussWake
from tests.agents.factories import UserFactory
from tests.clients import token_client
from threadcontext.models import SessionBinding, ThreadContextDecision, Workspace

pytestmark = pytest.mark.django_db

SLUG = "shared-name"
B_WORDS = "the launch code is in the blue folder"


def wake_for(bot) -> DiscussWake:
    now = timezone.now()
    return DiscussWake.objects.create(
        bot=bot,
        chat_id="oc_group",
        root_msg_id="om_b",
        status="done",
        last_message_id="om_b",
        first_message_at=now,
        due_at=now,
        deadline_at=now,
    )


def test_finding5_a_new_bot_with_a_deleted_bots_slug_sees_none_of_its_records(feishu, make_feishu_bot):
    # given: B's bot answered in a group, and has a discuss wake
    owner_b, owner_a = UserFactory(username="owner-b"), UserFactory(username="owner-a")
    bot_b = make_feishu_bot(slug=SLUG, owner=owner_b)
    assert feishu.say(bot_b, text=B_WORDS, mention=[bot_b])[0].status_code == 200
    wake_for(bot_b)
    assert ThreadContextDecision.objects.filter(bot_profile=SLUG).count() == 1
    root = Client()
    root.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    # when: B's bot is deleted through the admin and A creates one with the same slug
    deleted = root.post(f"/admin/agents/bot/{bot_b.pk}/delete/", {"post": "yes"})
    bot_a = make_feishu_bot(slug=SLUG, owner=owner_a)
    listed = token_client(owner_a).get(f"/api/v1/context/decisions/?profile={SLUG}")
    admin_pages = [
        root.get(f"/admin/threadcontext/threadcontextdecision/?bot_profile={SLUG}"),
        root.get(f"/admin/feishu/discusswake/?bot__id__exact={bot_a.pk}"),
        root.get(f"/admin/probe/probejudgement/?bot__id__exact={bot_a.pk}"),
    ]
    # then
    assert (deleted.status_code, listed.status_code, listed.json()) == (302, 200, [])
    assert [page.status_code for page in admin_pages] == [200, 200, 200]
    assert not any(B_WORDS in page.content.decode() for page in admin_pages)
    counts = [
        ThreadContextDecision.objects.filter(bot_profile=SLUG).count(),
        Workspace.objects.filter(bot_profile=SLUG).count(),
        SessionBinding.objects.filter(bot_profile=SLUG).count(),
        DiscussWake.objects.filter(bot=bot_a).count(),
    ]
    assert counts == [0, 0, 0, 0]


def test_finding5_a_renamed_bot_keeps_its_records_and_its_old_slug_starts_empty(feishu, make_feishu_bot):
    # given
    owner_b, owner_a = UserFactory(username="owner-b"), UserFactory(username="owner-a")
    bot_b = make_feishu_bot(slug=SLUG, owner=owner_b)
    feishu.say(bot_b, text=B_WORDS, mention=[bot_b])
    # when: B renames the bot, and A takes the old slug
    bot_b.slug = "renamed"
    bot_b.save()
    make_feishu_bot(slug=SLUG, owner=owner_a)
    # then
    as_a = token_client(owner_a).get(f"/api/v1/context/decisions/?profile={SLUG}").json()
    as_b = token_client(owner_b).get("/api/v1/context/decisions/?profile=renamed").json()
    assert (as_a, len(as_b), B_WORDS in as_b[0]["request_text"]) == ([], 1, True)
    assert Workspace.objects.filter(bot_profile="renamed").count() == 1
    assert Workspace.objects.filter(bot_profile=SLUG).count() == 0
