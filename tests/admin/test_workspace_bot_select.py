"""Issue 27, left: the workspace page picks its bot from a list, not a slug typed by hand."""

import re

import pytest
from django.urls import reverse

from tests.agents.factories import BotFactory
from threadcontext.models import Workspace

pytestmark = pytest.mark.django_db


def form_data(response) -> dict:
    """What the change form would post back unchanged (its fields' initial values, empty ones left out)."""
    form = response.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if value is None or value == []:
            continue
        data[name] = value if not isinstance(value, list) else ",".join(map(str, value))
    return data


def test_the_workspace_bot_is_a_select_of_the_hub_bots(admin_client):
    BotFactory(slug="planner", name="Planner")
    BotFactory(slug="coder", name="Coder")
    workspace = Workspace.objects.create(bot_profile="planner", chat_id="oc_team", name="Team")
    url = reverse("admin:threadcontext_workspace_change", args=[workspace.pk])

    page = admin_client.get(url)
    html = page.content.decode()

    select = re.search(r'<select name="bot_profile"[^>]*>(.*?)</select>', html, re.S).group(1)
    options = re.findall(r'<option value="([^"]*)"( selected)?>([^<]*)</option>', select)
    assert options == [
        ("", "", "---------"),
        ("coder", "", "Coder (coder)"),
        ("planner", " selected", "Planner (planner)"),
    ]

    # a slug not in the list is refused with a sentence, nothing saved
    refused = admin_client.post(url, form_data(page) | {"bot_profile": "ghost"})
    assert refused.status_code == 200
    assert "Select a valid choice" in refused.content.decode()
    assert Workspace.objects.get(pk=workspace.pk).bot_profile == "planner"
    # another bot from the list is saved
    moved = admin_client.post(url, form_data(page) | {"bot_profile": "coder"})
    assert moved.status_code == 302, moved.context["adminform"].form.errors if moved.context else moved
    assert Workspace.objects.get(pk=workspace.pk).bot_profile == "coder"


def test_a_workspace_of_a_bot_outside_the_list_keeps_its_value(admin_client):
    BotFactory(slug="planner", name="Planner")
    workspace = Workspace.objects.create(bot_profile="retired-bot", chat_id="oc_old", name="Old team")  # bot removed

    html = admin_client.get(reverse("admin:threadcontext_workspace_change", args=[workspace.pk])).content.decode()

    assert '<option value="retired-bot" selected>retired-bot</option>' in html
    assert '<option value="planner">Planner (planner)</option>' in html
