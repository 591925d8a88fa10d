"""Issue 30, finding 8: every console page that lists bots or turns checks the viewer's permissions on them.

admin_view lets any staff user in; the pages below list bots, judgements or a turn's input and output, so each
asks for the view permission of what it shows. Staff without it see no bot (or get 403), never a 500.
"""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from agents.models import Turn
from feishu.models import DiscussWake
from tests.agents.factories import BotFactory, ThreadFactory, UserFactory

pytestmark = pytest.mark.django_db

BOT_NAME = "Quartermaster Nine"


def staff_client(*codenames: str) -> Client:
    staff = UserFactory(username="staffer", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(staff)
    return client


def turn_with_wake() -> tuple[Turn, DiscussWake]:
    bot = BotFactory(slug="quartermaster", name=BOT_NAME)
    turn = Turn.objects.create(bot=bot, thread=ThreadFactory(bot=bot), trigger="discuss", source_message_id="om_1")
    now = timezone.now()
    wake = DiscussWake.objects.create(
        bot=bot,
        chat_id="oc_1",
        root_msg_id="om_1",
        status="done",
        last_message_id="om_1",
        first_message_at=now,
        due_at=now,
        deadline_at=now,
        turn=turn,
    )
    return turn, wake


def test_finding8_the_dashboard_lists_no_bot_to_staff_without_bot_and_turn_permissions():
    # given
    turn_with_wake()
    # when
    bare = staff_client().get("/admin/")
    bots_only = staff_client("view_bot").get("/admin/")
    allowed = staff_client("view_bot", "view_turn").get("/admin/")
    # then
    assert [bare.status_code, bots_only.status_code, allowed.status_code] == [200, 200, 200]
    assert [BOT_NAME in page.content.decode() for page in (bare, bots_only, allowed)] == [False, False, True]


def test_finding8_the_failing_closed_page_needs_the_judgement_view_permission():
    # given: an enabled bot with no usable model, which the page's "cannot answer" list would name
    BotFactory(slug="quartermaster", name=BOT_NAME, primary_model__is_enabled=False)
    # when
    bare = staff_client().get("/admin/probe/probejudgement/failing/")
    judgements_only = staff_client("view_probejudgement").get("/admin/probe/probejudgement/failing/")
    with_bots = staff_client("view_probejudgement", "view_bot").get("/admin/probe/probejudgement/failing/")
    # then
    assert [bare.status_code, judgements_only.status_code, with_bots.status_code] == [403, 200, 200]
    assert BOT_NAME not in bare.content.decode() + judgements_only.content.decode()
    assert BOT_NAME in with_bots.content.decode()


def test_finding8_a_turns_explain_needs_the_turns_view_permission():
    # given
    turn, wake = turn_with_wake()
    pages = [f"/admin/feishu/discusswake/turn/{turn.pk}/explain/", f"/admin/feishu/discusswake/{wake.pk}/explain/"]
    missing = "/admin/feishu/discusswake/turn/999999/explain/"
    # when
    wakes_only = staff_client("view_discusswake")
    denied = [wakes_only.get(page) for page in [*pages, missing]]
    both = staff_client("view_discusswake", "view_turn")
    allowed = [both.get(page).status_code for page in [*pages, missing]]
    # then: denied before the lookup, so a missing turn is a 403 too (no hint of which ids exist)
    assert [response.status_code for response in denied] == [403, 403, 403]
    assert not any(BOT_NAME in response.content.decode() for response in denied)
    assert allowed == [200, 200, 404]
