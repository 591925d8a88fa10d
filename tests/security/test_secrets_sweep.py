"""Issue 10: a planted value in every secret field never shows up in a log record, an API response or a text column.

Known values are planted in the provider's API key and the bot's Feishu app secret, encrypt key and verification
token; a Feishu conversation (an @ answered through the local LLM stub, and one whose provider refuses the key)
and the REST calls a client makes then run through the real paths. Searched afterwards: every log record (its
message and every structured field), every response body, and every text column of every table, read with raw
SQL (the secrets' own columns hold Fernet tokens, so a plaintext match anywhere is a leak). Figures printed.
"""

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.db import connection, models
from django.test import Client

from agents.models import Provider, Turn
from tests.agents.factories import LLMModelFactory, ProviderFactory, UserFactory
from tests.clients import token_client
from tests.stubs.llm_servers import AUTH_BODIES, StubResponse

pytestmark = pytest.mark.django_db

PLANTED = {
    "provider api key": "sk-planted-provider-key-7f3a9c",
    "feishu app secret": "planted-app-secret-51be02",
    "feishu encrypt key": "planted-encrypt-key-c0ffee",
    "feishu verification token": "planted-verification-token-9d41",
}
VIEW_ONLY_PERMISSIONS = ("view_provider", "view_bot", "view_mcpserver", "view_tokenproxy")
TEXT_FIELDS = (models.CharField, models.TextField, models.JSONField)


def text_column_values():
    """(table.column, raw value) for every text-like column of every model, read past the ORM's decryption."""
    with connection.cursor() as cursor:
        for model in apps.get_models():
            columns = [f.column for f in model._meta.concrete_fields if isinstance(f, TEXT_FIELDS)]
            if not columns:
                continue
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"SELECT {', '.join(connection.ops.quote_name(c) for c in columns)} FROM {table}")
            for row in cursor.fetchall():
                for column, value in zip(columns, row, strict=True):
                    if value is not None:
                        yield f"{model._meta.db_table}.{column}", str(value)


def record_texts(records) -> list[str]:
    texts = []
    for record in records:
        texts.append(record.getMessage())
        texts.extend(str(value) for value in vars(record).values())
        if record.exc_info:
            texts.append(repr(record.exc_info[1]))
    return texts


def test_secrets_sweep_finds_no_planted_secret_in_logs_responses_or_columns(
    feishu, make_feishu_bot, llm_stub, caplog, django_capture_on_commit_callbacks
):
    # given: every secret field holds a planted value
    caplog.set_level("DEBUG")
    owner = UserFactory(username="owner")
    staff = UserFactory(username="staff", is_staff=True, is_superuser=True)
    provider = ProviderFactory(
        kind=Provider.Kind.OPENAI_CHAT, base_url=llm_stub.url("/v1"), api_key=PLANTED["provider api key"], max_retries=0
    )
    bot = make_feishu_bot(
        slug="planner",
        owner=owner,
        primary_model=LLMModelFactory(provider=provider, name="gpt-4o"),
        feishu_app_secret=PLANTED["feishu app secret"],
        feishu_encrypt_key=PLANTED["feishu encrypt key"],
        feishu_verification_token=PLANTED["feishu verification token"],
    )
    responses = []
    # when: a Feishu conversation, one answered and one whose provider refuses the key
    responses.append(feishu.say(bot, text="hello bot", mention=[bot])[0])
    llm_stub.enqueue("openai_chat", StubResponse(status=401, body=AUTH_BODIES["openai_chat"]))
    responses.append(feishu.say(bot, text="again", mention=[bot])[0])
    # and REST calls as the owner and as staff, the admin's bot and provider pages included
    rest = token_client(owner)
    with django_capture_on_commit_callbacks(execute=True):
        thread = rest.post("/api/v1/threads/", {"bot": "planner", "runtime_mode": "chat"}, format="json")
    responses.append(thread)
    thread_id = thread.json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        posted = rest.post(f"/api/v1/threads/{thread_id}/messages/", {"content": "hi"}, format="json")
    responses.append(posted)
    for path in ["/api/v1/threads/", f"/api/v1/threads/{thread_id}/history/", f"/api/v1/threads/{thread_id}/context/"]:
        responses.append(rest.get(path))
    responses.extend(rest.get(f"/api/v1/turns/{turn.pk}/") for turn in Turn.objects.all())
    staff_api = token_client(staff)
    responses.append(staff_api.get("/api/v1/context/decisions/"))
    admin = Client()
    admin.force_login(staff)
    responses.append(admin.get(f"/admin/agents/bot/{bot.pk}/change/"))
    responses.append(admin.get(f"/admin/agents/provider/{provider.pk}/change/"))
    responses.append(admin.get("/admin/feishu/inboundevent/"))
    # and the same pages, their history and the token admin as staff who may only view them (issue 30, finding 1)
    viewer = UserFactory(username="viewer", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=VIEW_ONLY_PERMISSIONS))
    view_only = Client()
    view_only.force_login(viewer)
    for page in ["agents/bot", "agents/provider"]:
        pk = bot.pk if page == "agents/bot" else provider.pk
        responses.extend(view_only.get(f"/admin/{page}/{pk}/{view}/") for view in ("change", "history"))
    responses.append(view_only.get("/admin/authtoken/tokenproxy/"))
    # then
    assert [r.status_code for r in responses[:2]] == [200, 200]
    assert Turn.objects.count() == 3  # two Feishu turns and the REST one really ran
    haystacks = {
        "logs": record_texts(caplog.records),
        "responses": [r.content.decode(errors="replace") for r in responses],
        "columns": [f"{where}={value}" for where, value in text_column_values()],
    }
    found = {
        (secret, where): sum(planted in text for text in texts)
        for secret, planted in PLANTED.items()
        for where, texts in haystacks.items()
    }
    leaked = {key: count for key, count in found.items() if count}
    print(
        f"\n[secrets sweep] secrets={len(PLANTED)} log_records={len(caplog.records)} responses={len(responses)} "
        f"column_values={len(haystacks['columns'])} leaked={sum(leaked.values())}"
    )
    assert leaked == {}
