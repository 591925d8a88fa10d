"""Secrets encrypted at rest (core.fields) and structured logging (core.logging), through the real paths."""

import json
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from agents.models import Bot
from core.logging import KeyValueFormatter
from tests.agents.factories import BotFactory

BASE_DIR = Path(__file__).resolve().parent.parent
BOT_SECRET_COLUMNS = ("feishu_app_secret", "feishu_encrypt_key", "feishu_verification_token")


def _raw_columns(bot: Bot) -> tuple[str, ...]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(BOT_SECRET_COLUMNS)} FROM agents_bot WHERE id = %s", [bot.pk])
        return tuple(cursor.fetchone())


# --- secrets at rest -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_bot_secret_is_a_fernet_token_in_its_column_and_reads_back_in_clear():
    # given a bot with its three Feishu secrets
    bot = BotFactory(feishu_app_secret="app-secret-1", feishu_encrypt_key="encrypt-key-2", feishu_verification_token="")

    # when
    raw = _raw_columns(bot)
    reloaded = Bot.objects.get(pk=bot.pk)

    # then: the columns hold ciphertext (an empty secret stays empty), the model reads the clear text
    assert raw[0].startswith("gAAAAA") and "app-secret-1" not in raw[0]
    assert raw[1].startswith("gAAAAA") and "encrypt-key-2" not in raw[1]
    assert raw[2] == ""
    assert (reloaded.feishu_app_secret, reloaded.feishu_encrypt_key, reloaded.feishu_verification_token) == (
        "app-secret-1",
        "encrypt-key-2",
        "",
    )


@pytest.mark.django_db
def test_field_encryption_key_rotation_reads_old_values_and_writes_with_the_newest_key(settings):
    # given a secret written under key A
    key_a, key_b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEY = [key_a]
    bot = BotFactory(feishu_app_secret="before-rotation")

    # when key B is put first and A kept behind it, and a second secret is written
    settings.FIELD_ENCRYPTION_KEY = [key_b, key_a]
    reloaded = Bot.objects.get(pk=bot.pk)
    Bot.objects.filter(pk=bot.pk).update(feishu_encrypt_key="after-rotation")
    raw_secret, raw_encrypt_key, _ = _raw_columns(bot)

    # then: the old value still reads; the new one is B's token only
    assert reloaded.feishu_app_secret == "before-rotation"
    assert Fernet(key_a.encode()).decrypt(raw_secret.encode()) == b"before-rotation"
    assert Fernet(key_b.encode()).decrypt(raw_encrypt_key.encode()) == b"after-rotation"
    assert Bot.objects.get(pk=bot.pk).feishu_encrypt_key == "after-rotation"


@pytest.mark.django_db
def test_a_secret_under_an_unknown_key_is_a_clear_configuration_error_not_garbage(settings):
    # given a secret written under key A, then a hub started with only key B
    settings.FIELD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]
    bot = BotFactory(feishu_app_secret="written-under-a")
    settings.FIELD_ENCRYPTION_KEY = [Fernet.generate_key().decode()]

    # when / then
    with pytest.raises(
        ImproperlyConfigured, match="^A stored secret cannot be decrypted: check FIELD_ENCRYPTION_KEY.$"
    ):
        Bot.objects.get(pk=bot.pk)


@pytest.mark.django_db
def test_a_malformed_field_encryption_key_is_a_clear_configuration_error(settings):
    settings.FIELD_ENCRYPTION_KEY = ["not-a-fernet-key"]

    with pytest.raises(ImproperlyConfigured, match="^FIELD_ENCRYPTION_KEY must hold url-safe base64 Fernet keys.$"):
        with transaction.atomic():
            BotFactory(feishu_app_secret="anything")
    assert Bot.objects.count() == 0


# --- structured logging --------------------------------------------------------------------------------------


def test_key_value_formatter_prints_every_extra_field_as_key_value():
    # given a record as `logger.info("...", extra={...})` makes it
    record = logging.LogRecord("agents.services.threads", logging.INFO, __file__, 1, "thread created", (), None)
    record.__dict__.update({"thread_id": 7, "bot": "planner"})

    # when
    line = KeyValueFormatter().format(record)

    # then
    assert line.endswith(" INFO agents.services.threads thread created thread_id=7 bot='planner'")


def _log_one_record(*, debug: str) -> str:
    """Configure logging from the real settings in a fresh process, log one structured record, return stderr."""
    env = {key: value for key, value in os.environ.items() if key not in {"DJANGO_SETTINGS_MODULE", "LOG_LEVEL"}}
    env.update({"DEBUG": debug, "SECRET_KEY": secrets.token_urlsafe(50)})
    code = "import logging; logging.getLogger('amuxweb.check').info('hello', extra={'thread_id': 7, 'bot': 'planner'})"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_production_logs_are_json_lines_with_the_structured_fields():
    # when DEBUG is off
    line = _log_one_record(debug="false")

    # then
    record = json.loads(line)
    assert {key: record[key] for key in ("levelname", "name", "message", "thread_id", "bot")} == {
        "levelname": "INFO",
        "name": "amuxweb.check",
        "message": "hello",
        "thread_id": 7,
        "bot": "planner",
    }


def test_debug_logs_are_key_value_lines():
    # when DEBUG is on
    line = _log_one_record(debug="true")

    # then
    assert line.endswith(" INFO amuxweb.check hello thread_id=7 bot='planner'")
