"""Project-level checks: production settings pass `check --deploy`, every setting is documented, migrations apply.

The settings checks run `manage.py` in a subprocess with a production-like environment, the way a deploy does.
"""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BASE_DIR = Path(__file__).resolve().parent.parent
ENV_VAR = re.compile(r"""\benv(?:\.\w+)?\(\s*["']([A-Z][A-Z0-9_]*)["']""")


def _manage(*args: str, **env_overrides: str) -> subprocess.CompletedProcess:
    # The deployment is judged as an operator would start it: without the test run's own variables
    # (DJANGO_ALLOW_ASYNC_UNSAFE is set for the browser tests' Playwright loop, tests/browser/conftest.py).
    ignored = {"DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE", "PYTEST_CURRENT_TEST", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {key: value for key, value in os.environ.items() if key not in ignored}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_settings_pass_check_deploy_with_no_warnings():
    # given DEBUG off and a strong SECRET_KEY (everything else at its default)
    strong_key = secrets.token_urlsafe(64)

    # when
    result = _manage("check", "--deploy", "--fail-level", "WARNING", DEBUG="false", SECRET_KEY=strong_key)

    # then
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."


def test_production_refuses_to_start_without_a_secret_key():
    result = _manage("check", DEBUG="false")

    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off." in result.stderr


def test_every_environment_variable_is_in_env_example_and_the_configuration_docs():
    # given every variable the settings read
    sources = [BASE_DIR / "amuxweb" / "settings" / "base.py"]
    names = sorted({name for source in sources for name in ENV_VAR.findall(source.read_text())})
    env_example = (BASE_DIR / ".env.example").read_text()
    configuration = (BASE_DIR / "docs" / "configuration.md").read_text()

    # then each is a line of .env.example and a row of the configuration page's tables
    assert "DATABASE_URL" in names and "REDIS_URL" in names
    missing_example = [name for name in names if not re.search(rf"^#? ?{name}=", env_example, re.MULTILINE)]
    missing_configuration = [name for name in names if f"| `{name}` |" not in configuration]
    assert (missing_example, missing_configuration) == ([], [])


@pytest.mark.django_db
def test_migrations_are_all_applied_on_this_database():
    """The suite's database (SQLite or PostgreSQL, whichever this run uses) was built by the migrations."""
    executor = MigrationExecutor(connection)

    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())

    assert plan == []
    applied_apps = {app for app, _ in executor.recorder.applied_migrations()}
    assert {"agents", "threadcontext", "probe", "feishu"} <= applied_apps


def test_migrations_apply_unapply_and_reapply_on_a_fresh_database(tmp_path):
    """Forward, back to zero and forward again, on a fresh database of the engine this run uses."""
    database = settings.DATABASES["default"]
    if connection.vendor == "postgresql":
        import psycopg

        name = f"{database['NAME']}_migrate_check"[:63]
        admin_url = f"postgresql://{database['USER']}@{database['HOST']}:{database['PORT'] or 5432}/postgres"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'CREATE DATABASE "{name}"')
        url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT'] or 5432}/{name}"
    else:
        url = f"sqlite:///{tmp_path / 'migrate.sqlite3'}"
    try:
        # when
        steps = [
            _manage("migrate", "--noinput", DEBUG="true", DATABASE_URL=url),
            _manage("migrate", "agents", "zero", "--noinput", DEBUG="true", DATABASE_URL=url),
            _manage("migrate", "--noinput", DEBUG="true", DATABASE_URL=url),
            _manage("migrate", "--check", DEBUG="true", DATABASE_URL=url),
        ]
    finally:
        if connection.vendor == "postgresql":
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')

    # then
    for step in steps:
        assert step.returncode == 0, step.stdout + step.stderr
    assert "Unapplying agents.0001_initial... OK" in steps[1].stdout
    assert "Applying agents.0001_initial... OK" in steps[2].stdout
