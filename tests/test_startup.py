"""Start-up (issue 11): a process imports lark-oapi and the provider SDKs only when it talks to them.

lark-oapi costs ~5 s of CPU and ~100 MB, each provider SDK 1-3 s: a management command that calls neither Feishu
nor a provider must not pay for them, and a web or worker process loads lark-oapi as it boots so no request pays
for it. Each test runs a fresh interpreter (this test process has long imported every SDK) and reads its
sys.modules; no timing, so a busy machine changes nothing.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.bench_startup import OUR_PACKAGES
from feishu import LARK_MODULES

BASE_DIR = Path(__file__).resolve().parent.parent
HEAVY_SDKS = ("lark_oapi", "openai", "anthropic", "google.genai")
REDIS_CLIENT = ("redis", "redis.asyncio")

# Runs management commands in-process, one after the other, and reports which of `modules` each left imported.
COMMANDS = """
import json, sys
import django
django.setup()  # as manage.py does; without it every command would fail at once and import nothing
from django.core.management import CommandError, call_command
loaded = {}
for argv in %(commands)r:
    try:
        call_command(*argv, verbosity=0)
    except CommandError as error:  # the explain command's "no decision recorded": still a run; nothing else is
        print(type(error).__name__, error, file=sys.stderr)
    loaded[argv[0]] = [name for name in %(modules)r if name in sys.modules]
print(json.dumps(loaded))
"""

# The explain command as an operator runs it (manage.py, so with the system checks it asks for), on a migrated
# database where it finds no decision; reports whether the URLconf and the API's libraries were loaded.
EXPLAIN_FROM_THE_COMMAND_LINE = """
import json, sys
import django
django.setup()
from django.core.management import call_command, execute_from_command_line
call_command("migrate", verbosity=0)  # skip_checks: loads no URLconf
before = [name for name in %(modules)r if name in sys.modules]
try:
    execute_from_command_line(["manage.py", "feishu_context_explain", "om_no_such_root"])
except SystemExit as exit:  # "no decision recorded" is a CommandError: exit status 1
    print("exit", exit.code, file=sys.stderr)
print(json.dumps({"before": before, "after": [name for name in %(modules)r if name in sys.modules]}))
"""
URLCONF_MODULES = ("amuxweb.urls", "drf_spectacular.views", "rest_framework.compat")

# What a Celery worker and a web process import before they serve anything, without the load they do at boot.
WORKER_AND_WEB_IMPORTS = """
import importlib, json, sys
import django
django.setup()
from celery import current_app
current_app.loader.import_default_modules()  # every tasks module, as the worker imports them
from django.urls import get_resolver
get_resolver().url_patterns  # every view module, as `check` and the WSGI app load them
from django.contrib import admin
admin.site.get_urls()
before = [name for name in %(sdks)r if name in sys.modules]
from feishu import lark_modules_load
lark_modules_load()
print(json.dumps({"before_load": before, "after_load": [name for name in %(sdks)r if name in sys.modules]}))
"""

# The WSGI app as gunicorn loads it, then one signed, encrypted message event through the webhook handler.
FIRST_WEBHOOK_REQUEST = """
import json, sys
import amuxweb.wsgi
loaded_at_boot = "lark_oapi" in sys.modules
from agents.models import Bot
from feishu.inbound import webhook
from feishu.inbound.signing import event_request_build, message_event_payload
bot = Bot(pk=1, slug="boot", feishu_app_id="cli_boot", feishu_verification_token="v-token",
          feishu_encrypt_key="e-key")
payload = message_event_payload(verification_token="v-token", app_id="cli_boot", message_id="om_boot",
                                chat_id="oc_boot", text="hello")
request = event_request_build(payload=payload, encrypt_key="e-key")
modules_before = set(sys.modules)
outcome = webhook.webhook_handle(bot=bot, path="/feishu/webhook/boot/", headers=request.headers,
                                 body=request.body, max_age_seconds=300)
imported = sorted(name for name in set(sys.modules) - modules_before if name.startswith("lark_oapi"))
print(json.dumps({"loaded_at_boot": loaded_at_boot, "status": outcome.status_code, "body": outcome.body,
                  "lark_modules_imported_by_the_request": imported}))
"""


# The signal a Celery worker sends in its main process before it forks the pool.
WORKER_BOOT = """
import json, sys
import django
django.setup()
from celery.signals import worker_init
before = "lark_oapi" in sys.modules
worker_init.send(sender=None)
print(json.dumps([before, "lark_oapi" in sys.modules, [type(sys.modules[name]).__name__ for name in %(modules)r]]))
"""


def run_fresh(code: str, *, database: Path) -> object:
    """`code` in a new interpreter on its own SQLite file, never the run's database, and with no broker."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTEST_CURRENT_TEST", "REDIS_URL")}
    env["DJANGO_SETTINGS_MODULE"] = "amuxweb.settings.test"
    env["DATABASE_URL"] = f"sqlite:///{database}"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_commands_that_call_neither_feishu_nor_a_provider_import_no_heavy_sdk(tmp_path):
    # given: the commands an operator runs that never call out
    commands = [["check"], ["migrate"], ["feishu_context_explain", "om_no_such_root"]]
    # when: they run in one fresh process (the explain command finds no decision and says so)
    loaded = run_fresh(COMMANDS % {"commands": commands, "modules": HEAVY_SDKS}, database=tmp_path / "db.sqlite3")
    # then
    assert loaded == {"check": [], "migrate": [], "feishu_context_explain": []}


def test_commands_that_never_enqueue_import_no_redis_client(tmp_path):
    """`redis.exceptions` runs redis/__init__, which imports redis.asyncio (~0.15 s of CPU): only a process that
    builds a Redis client (kombu's transport, the send budget, the cache) loads it, not one importing a service."""
    # given: the commands an operator runs that never talk to the broker
    commands = [["check"], ["migrate"], ["feishu_context_explain", "om_no_such_root"]]
    # when: they run in one fresh process, with no broker configured
    loaded = run_fresh(COMMANDS % {"commands": commands, "modules": REDIS_CLIENT}, database=tmp_path / "db.sqlite3")
    # then
    assert loaded == {"check": [], "migrate": [], "feishu_context_explain": []}


def test_the_explain_command_runs_no_system_checks_so_it_loads_no_urlconf(tmp_path):
    """The checks load the URLconf, DRF (whose compat module imports requests, psycopg, yaml, pygments) and
    drf-spectacular: ~0.6 s of CPU that a read-only diagnosis does not need (`manage.py check` runs them)."""
    # when: the command runs from the command line in a fresh process
    seen = run_fresh(EXPLAIN_FROM_THE_COMMAND_LINE % {"modules": URLCONF_MODULES}, database=tmp_path / "db.sqlite3")
    # then
    assert seen == {"before": [], "after": []}


def test_worker_and_web_modules_import_no_heavy_sdk_until_the_boot_loads_lark_oapi(tmp_path):
    # when: a fresh process imports every tasks module, view and admin, then does what a worker's boot does
    loaded = run_fresh(WORKER_AND_WEB_IMPORTS % {"sdks": HEAVY_SDKS}, database=tmp_path / "db.sqlite3")
    # then: nothing heavy on import; the boot's load brings lark-oapi and no provider SDK
    assert loaded == {"before_load": [], "after_load": ["lark_oapi"]}


def test_f1_the_wsgi_app_loads_lark_oapi_so_the_first_webhook_request_imports_none_of_it(tmp_path):
    """F1: lark-oapi takes seconds to import cold and Feishu waits 3 s: the app loads it at boot, and the first
    request imports nothing of it (a count of modules, which a busy machine does not change)."""
    # when: the WSGI app is loaded as a gunicorn worker (or the --preload master) loads it, then one event arrives
    seen = run_fresh(FIRST_WEBHOOK_REQUEST, database=tmp_path / "db.sqlite3")
    # then
    assert seen == {
        "loaded_at_boot": True,
        "status": 200,
        "body": {"msg": "success"},
        "lark_modules_imported_by_the_request": [],
    }


def test_the_celery_worker_boot_loads_lark_oapi_before_the_pool_forks(tmp_path):
    # when: a fresh process sends the worker's boot signal
    seen = run_fresh(WORKER_BOOT % {"modules": LARK_MODULES}, database=tmp_path / "db.sqlite3")
    # then: the lazy modules have run their bodies (plain modules now)
    assert seen == [False, True, ["module"] * len(LARK_MODULES)]


def test_make_install_compiles_the_bytecode_of_every_package_a_process_imports():
    """Under PYTHONDONTWRITEBYTECODE a package `make install` does not compile is recompiled at every start of every
    process (~0.3 s of CPU for the four, `python -m bench startup`); the bench measures the same list."""
    # given: our packages (the test suite and the benches are never imported by a deployed process)
    packages = {path.parent.name for path in BASE_DIR.glob("*/__init__.py")} - {"tests", "bench"}
    # when: the Makefile's list is read
    line = next(line for line in (BASE_DIR / "Makefile").read_text().splitlines() if line.startswith("OUR_PACKAGES"))
    compiled = line.partition(":=")[2].split()
    # then
    assert sorted(compiled) == sorted(packages) == sorted(OUR_PACKAGES)
