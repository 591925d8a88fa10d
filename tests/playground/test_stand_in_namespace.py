"""Issue 30, finding 2: playground stand-ins live in their own namespace, which real bots cannot enter.

A stand-in is found by its hub bot's key (`Bot.sandbox_of`), flagged `is_sandbox`, and the database holds the two
together; its slug is only a name. So a real bot whose slug looks like a stand-in's is never rewritten, two hub
bots whose slugs share a long prefix get two stand-ins, and a slug of any length posts without a 500.
"""

import json

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from agents.models import Bot, Turn
from console.models import PlaygroundGroup, PlaygroundMember
from tests.agents.factories import UserFactory

pytestmark = pytest.mark.django_db

LONG_PREFIX = "a" * 60


def post(client, group, capture, **body):
    with capture(execute=True):
        return client.post(
            reverse("admin:playground_post", args=[group.pk]), data=json.dumps(body), content_type="application/json"
        )


def group_of(*bots) -> PlaygroundGroup:
    group = PlaygroundGroup.objects.create(name="Namespace", kind=PlaygroundGroup.Kind.GROUP)
    for bot in bots:
        PlaygroundMember.objects.create(group=group, bot=bot, reply_mode=PlaygroundMember.ReplyMode.MENTION)
    return group


def test_finding2_a_real_bot_named_like_a_stand_in_is_never_taken_over(
    admin_client, make_feishu_bot, django_capture_on_commit_callbacks
):
    # given: owner B's real bot is called what the old code named A's stand-in
    owner_a, owner_b = UserFactory(username="owner-a"), UserFactory(username="owner-b")
    hub = make_feishu_bot(slug="a-7", owner=owner_a, system_prompt="A's prompt")
    real = make_feishu_bot(slug="playground-a-7", owner=owner_b, name="B's bot", system_prompt="B's prompt")
    before = Bot.objects.filter(pk=real.pk).values().get()
    # when: a playground group adds A's bot and @-mentions it
    response = post(
        admin_client, group_of(hub), django_capture_on_commit_callbacks, sender="Al", text="hi", mentions=[hub.pk]
    )
    # then: B's bot is untouched and answered nothing; A's stand-in is a new, linked row
    assert response.status_code == 201
    assert Bot.objects.filter(pk=real.pk).values().get() == before
    stand_in = Bot.objects.get(sandbox_of=hub)
    assert (stand_in.is_sandbox, stand_in.owner_id, stand_in.pk != real.pk) == (True, owner_a.pk, True)
    assert Turn.objects.filter(bot=real).count() == 0
    assert Turn.objects.filter(bot=stand_in).count() == 1


def test_finding2_two_long_slugs_with_one_prefix_get_two_stand_ins_and_no_500(
    admin_client, make_feishu_bot, django_capture_on_commit_callbacks
):
    # given: two owners' bots whose 64-character slugs share their first 60 characters
    first = make_feishu_bot(slug=LONG_PREFIX + "-one", owner=UserFactory(username="owner-a"), feishu_app_id="cli_1")
    second = make_feishu_bot(slug=LONG_PREFIX + "-two", owner=UserFactory(username="owner-b"), feishu_app_id="cli_2")
    group = group_of(first, second)
    # when
    response = post(
        admin_client, group, django_capture_on_commit_callbacks, sender="Al", text="hi", mentions=[first.pk, second.pk]
    )
    # then
    assert response.status_code == 201
    stand_ins = {bot.sandbox_of_id: bot for bot in Bot.objects.filter(is_sandbox=True)}
    assert sorted(stand_ins) == sorted([first.pk, second.pk])
    assert (stand_ins[first.pk].owner_id, stand_ins[second.pk].owner_id) == (first.owner_id, second.owner_id)
    # (each echoing answer names the other bot: B1 hands it over too; the person's @ started one turn each)
    assert Turn.objects.filter(bot__in=stand_ins.values(), trigger="mention").count() == 2


def test_finding2_the_database_keeps_the_flag_and_the_hub_bot_together(make_feishu_bot):
    # given
    hub = make_feishu_bot(slug="hub")
    # when / then: a flagged bot without its hub bot, and a real bot pointing at one, are both refused
    for fields in ({"is_sandbox": True}, {"is_sandbox": False, "sandbox_of": hub}):
        with pytest.raises(IntegrityError), transaction.atomic():
            make_feishu_bot(**fields)
    assert Bot.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_finding2_the_migration_links_old_stand_ins_by_slug_once_and_drops_the_unsure_ones():
    # given: the schema before the link, with a stand-in of "planner", a cut one and one whose hub bot is gone
    executor = MigrationExecutor(connection)
    before, after = [("agents", "0013_bot_is_sandbox")], [("agents", "0015_bot_stand_in_constraint")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    owner = old.get_model(*settings.AUTH_USER_MODEL.split(".")).objects.create(username="owner")
    model = old.get_model("agents", "LLMModel").objects.create(
        provider=old.get_model("agents", "Provider").objects.create(name="p", kind="local_rules"), name="m"
    )
    old_bot = old.get_model("agents", "Bot")

    def make(slug: str, is_sandbox: bool):
        return old_bot.objects.create(slug=slug, name=slug, owner=owner, primary_model=model, is_sandbox=is_sandbox)

    hub = make("planner", False)
    make("playground-planner", True)
    make(("playground-" + "b" * 60)[:64], True)
    make("playground-gone", True)
    # when
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    # then
    new_bot = executor.loader.project_state(after).apps.get_model("agents", "Bot")
    assert list(new_bot.objects.filter(is_sandbox=True).values_list("slug", "sandbox_of_id")) == [
        ("playground-planner", hub.pk)
    ]
    call_command("migrate", verbosity=0)
