"""A6: a bot's Feishu credentials verified against Feishu (the stub, through lark-oapi): a tenant token and the
bot's info fetched, the result and its time stored; on save, on the verify button and by beat."""

from types import SimpleNamespace

import pytest
from django.contrib import admin
from django.test import RequestFactory
from django.urls import reverse

from agents.models import Bot
from feishu.models import FeishuCredentialCheck
from feishu.outbound.verify import feishu_credentials_verify
from feishu.tasks import feishu_credentials_verify_all_task

pytestmark = pytest.mark.django_db


def test_right_credentials_are_accepted_with_the_bot_info(feishu_stub, make_feishu_bot):
    bot = make_feishu_bot(slug="planner")

    check = feishu_credentials_verify(bot=bot)

    assert (check.ok, check.detail, check.app_name, check.open_id) == (
        True,
        "",
        bot.feishu_app_id,
        f"ou_bot_{bot.feishu_app_id}",
    )
    assert check.checked_at is not None
    token_requests = [request for request in feishu_stub.requests if request.route == "token"]
    assert token_requests and token_requests[-1].body["app_secret"] == bot.feishu_app_secret


def test_a_refused_secret_is_stored_with_feishus_reason(feishu_stub, make_feishu_bot):
    bot = make_feishu_bot(slug="planner")
    feishu_stub.fail_next("token", status=200, code=10014, msg="app secret invalid")

    check = feishu_credentials_verify(bot=bot)

    assert check.ok is False and "app secret invalid" in check.detail
    assert FeishuCredentialCheck.objects.get(bot=bot).pk == check.pk  # one row per bot, updated in place


def test_a_bot_without_an_app_is_refused_without_asking_feishu(feishu_stub, make_feishu_bot):
    bot = make_feishu_bot(slug="rest-only", feishu_app_id="", feishu_app_secret="")

    check = feishu_credentials_verify(bot=bot)

    assert (check.ok, check.detail) == (False, "The bot has no Feishu app id or app secret.")
    assert feishu_stub.requests == []


def test_saving_new_credentials_verifies_them(
    feishu_stub, make_feishu_bot, admin_user, django_capture_on_commit_callbacks
):
    bot = make_feishu_bot(slug="planner")
    request = RequestFactory().post("/")
    request.user = admin_user
    form = SimpleNamespace(changed_data=["feishu_app_secret"])

    with django_capture_on_commit_callbacks(execute=True):
        admin.site._registry[Bot].save_model(request, bot, form, change=True)

    assert FeishuCredentialCheck.objects.get(bot=bot).ok is True


def test_beat_verifies_every_bot_with_an_app(feishu_stub, make_feishu_bot):
    make_feishu_bot(slug="one")
    make_feishu_bot(slug="two")
    make_feishu_bot(slug="rest-only", feishu_app_id="", feishu_app_secret="")

    assert feishu_credentials_verify_all_task() == 2
    assert sorted(FeishuCredentialCheck.objects.values_list("bot__slug", "ok")) == [("one", True), ("two", True)]


def test_u3_verify_stores_and_shows_a_refusal_that_quotes_the_app_secret_redacted(
    feishu_stub, make_feishu_bot, admin_client
):
    # given Feishu refuses the token and quotes the app secret it was sent, then the bot info likewise
    bot = make_feishu_bot(slug="planner")
    feishu_stub.fail_next("token", status=200, code=10014, msg=f"app secret invalid: {bot.feishu_app_secret}")

    # when the operator presses the setup page's verify button
    response = admin_client.post(reverse("admin:agents_bot_verify", args=[bot.pk]), follow=True)

    # then the stored detail, the message and the setup page say why without the secret
    page = response.content.decode()
    detail = FeishuCredentialCheck.objects.get(bot=bot).detail
    assert detail == (
        "tenant token: ObtainAccessTokenException: obtain self tenant access token failed, code: 10014, "
        "msg: app secret invalid: [redacted]"
    )
    assert response.status_code == 200
    assert bot.feishu_app_secret not in page and "app secret invalid: [redacted]" in page

    # and a refusal of the bot info quoting the secret is stored redacted too
    feishu_stub.fail_next("bot_info", status=400, code=10014, msg=f"bad secret {bot.feishu_app_secret}")
    check = feishu_credentials_verify(bot=bot)
    assert check.detail == "bot/v3/info: bad secret [redacted] (code 10014)"
