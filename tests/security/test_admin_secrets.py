"""Issue 30, finding 1: secrets are write-only in every admin path, for every viewer.

Staff with exactly the narrow view permissions the issue names (view_provider, view_bot, view_mcpserver,
view_tokenproxy), and a superuser, open every admin page a secret could surface on: the lists, the change pages
(rendered read-only for a view-only user), the history pages and the API token admin. Planted values in the
provider's API key, the bot's three Feishu secrets, an MCP server's environment and headers, and an API token's
key must appear in no response body; the pages show "set (ends …XXXX)" instead.
"""

import io
import json

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from agents.admin.secrets import WriteOnlySecretsAdmin, encrypted_field_names
from agents.models import McpServer
from tests.agents.factories import BotFactory, ProviderFactory, UserFactory

pytestmark = pytest.mark.django_db

PLANTED = {
    "provider api key": "sk-planted-provider-key-7f3a9c",
    "feishu app secret": "planted-app-secret-51be02",
    "feishu encrypt key": "planted-encrypt-key-c0ffee",
    "feishu verification token": "planted-verification-token-9d41",
    "mcp env value": "planted-mcp-env-token-a1b2c3",
    "mcp header value": "Bearer planted-mcp-header-d4e5f6",
}
NARROW_PERMISSIONS = ("view_provider", "view_bot", "view_mcpserver", "view_tokenproxy")


def planted_world():
    """A provider, a bot, an MCP server per transport and an API token, each holding planted secrets."""
    owner = UserFactory(username="owner")
    provider = ProviderFactory(api_key=PLANTED["provider api key"])
    bot = BotFactory(
        slug="planner",
        owner=owner,
        primary_model__provider=provider,
        feishu_app_id="cli_planted",
        feishu_app_secret=PLANTED["feishu app secret"],
        feishu_encrypt_key=PLANTED["feishu encrypt key"],
        feishu_verification_token=PLANTED["feishu verification token"],
    )
    stdio = McpServer.objects.create(
        bot=bot, name="tracker", command="tracker-mcp", environment=json.dumps({"API_TOKEN": PLANTED["mcp env value"]})
    )
    http = McpServer.objects.create(
        bot=bot,
        name="search",
        transport=McpServer.Transport.STREAMABLE_HTTP,
        url="https://mcp.example.com/",
        headers=json.dumps({"Authorization": PLANTED["mcp header value"]}),
    )
    token = Token.objects.create(user=owner)
    return provider, bot, [stdio, http], token


def admin_pages(provider, bot, servers, token) -> list[str]:
    pages = []
    for model, pk in [("agents/provider", provider.pk), ("agents/bot", bot.pk)] + [
        ("agents/mcpserver", server.pk) for server in servers
    ]:
        pages += [f"/admin/{model}/", f"/admin/{model}/{pk}/change/", f"/admin/{model}/{pk}/history/"]
    pages += ["/admin/authtoken/tokenproxy/", f"/admin/authtoken/tokenproxy/{token.user_id}/change/"]
    pages += [f"/admin/authtoken/tokenproxy/{token.user_id}/history/"]
    return pages


def narrow_staff():
    staff = UserFactory(username="viewer", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=NARROW_PERMISSIONS))
    return staff


def planted_found(bodies: list[str], values: list[str]) -> dict[str, int]:
    found = {value: sum(value in body for body in bodies) for value in values}
    return {value: count for value, count in found.items() if count}


@pytest.mark.parametrize("viewer", ["narrow staff", "superuser"])
def test_finding1_no_planted_secret_on_any_admin_page(viewer):
    # given
    provider, bot, servers, token = planted_world()
    user = (
        narrow_staff() if viewer == "narrow staff" else UserFactory(username="root", is_staff=True, is_superuser=True)
    )
    client = Client()
    client.force_login(user)
    # when
    responses = {page: client.get(page) for page in admin_pages(provider, bot, servers, token)}
    # then
    statuses = {page: response.status_code for page, response in responses.items()}
    bodies = [response.content.decode() for response in responses.values()]
    found = planted_found(bodies, [*PLANTED.values(), token.key])
    print(f"\n[admin secrets] viewer={viewer} pages={len(bodies)} planted_found={sum(found.values())}")
    assert statuses == dict.fromkeys(responses, 200)
    assert found == {}


def test_finding1_view_only_pages_show_each_secret_as_its_state():
    # given
    provider, bot, servers, _token = planted_world()
    client = Client()
    client.force_login(narrow_staff())
    # when
    provider_page = client.get(f"/admin/agents/provider/{provider.pk}/change/").content.decode()
    bot_page = client.get(f"/admin/agents/bot/{bot.pk}/change/").content.decode()
    stdio_page = client.get(f"/admin/agents/mcpserver/{servers[0].pk}/change/").content.decode()
    http_page = client.get(f"/admin/agents/mcpserver/{servers[1].pk}/change/").content.decode()
    # then: the state in words, with the tail an operator recognises a key by
    assert "set (ends …9c)" not in provider_page
    assert "set (ends …3a9c)" in provider_page
    assert ["set (ends …be02)", "set (ends …ffee)", "set (ends …9d41)"] == [
        words for words in ["set (ends …be02)", "set (ends …ffee)", "set (ends …9d41)"] if words in bot_page
    ]
    assert "API_TOKEN: set (ends …b2c3)" in stdio_page
    assert "Authorization: set (ends …e5f6)" in http_page
    assert "_clear" not in provider_page + bot_page + stdio_page + http_page


def test_finding1_every_admin_of_an_encrypted_field_is_write_only():
    # given: every registered admin of a model that holds an encrypted (secret) field
    holders = {
        model: model_admin for model, model_admin in admin.site._registry.items() if encrypted_field_names(model)
    }
    # then: each renders its secrets as states only, and never lists, filters or searches by one
    assert sorted(model.__name__ for model in holders) == ["Bot", "McpServer", "Provider"]
    for model, model_admin in holders.items():
        secrets = set(encrypted_field_names(model))
        assert isinstance(model_admin, WriteOnlySecretsAdmin), model
        assert all(hasattr(model_admin, f"{name}_state") for name in secrets), model
        assert not secrets & {*model_admin.list_display, *model_admin.search_fields, *model_admin.list_filter}
        assert not secrets & set(model_admin.readonly_fields), model


def test_finding1_token_key_shown_once_to_its_owner():
    # given: staff with no permission at all, and an old token
    staff = UserFactory(username="staffer", is_staff=True)
    old = Token.objects.create(user=staff).key
    client = Client()
    client.force_login(staff)
    # when
    before = client.get("/admin/authtoken/tokenproxy/mine/").content.decode()
    created = client.post("/admin/authtoken/tokenproxy/mine/").content.decode()
    after = client.get("/admin/authtoken/tokenproxy/mine/").content.decode()
    # then: the new key once, in the POST's answer; the old one is gone
    new = Token.objects.get(user=staff).key
    assert (old in before, new in created, new in after, old != new) == (False, True, False, True)
    assert not Token.objects.filter(key=old).exists()


def test_finding1_token_admin_adds_and_changes_nothing():
    # given
    _provider, _bot, _servers, token = planted_world()
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(root)
    # when
    add = client.get("/admin/authtoken/tokenproxy/add/")
    change = client.post(f"/admin/authtoken/tokenproxy/{token.user_id}/change/", {"user": root.pk})
    # then
    assert (add.status_code, change.status_code) == (403, 403)
    assert Token.objects.get(user=token.user).key == token.key


def test_finding1_a_rest_only_users_token_is_made_by_command_and_printed_once():
    # given: a user who is not staff, with an old token
    user = UserFactory(username="rest-only")
    old = Token.objects.create(user=user).key
    out = io.StringIO()
    # when
    call_command("api_token_replace", "rest-only", stdout=out)
    # then: the new key printed, the old one gone, and it authenticates over REST
    new = Token.objects.get(user=user).key
    assert out.getvalue().startswith(f"API token of rest-only: {new}  ")
    assert not Token.objects.filter(key=old).exists()
    response = Client().get("/api/v1/threads/", HTTP_AUTHORIZATION=f"Token {new}")
    assert response.status_code == 200


def test_finding1_the_token_command_refuses_an_unknown_user_and_writes_nothing():
    # given
    count = Token.objects.count()
    # when / then
    with pytest.raises(CommandError, match="No active user named 'nobody'"):
        call_command("api_token_replace", "nobody", stdout=io.StringIO())
    assert Token.objects.count() == count
