"""Start-up (issue 11): a process that never calls a provider never imports a provider SDK; a worker imports
the configured ones as it boots, and an import interrupted half-way is never kept.

Importing openai, anthropic or google-genai costs seconds of CPU and tens of MB per process (web workers,
Celery workers, every management command). The registry resolves adapters by kind on first use; these tests
run a fresh interpreter, since this test process has long imported every SDK.
"""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from agents.llm import registry

BASE_DIR = Path(__file__).resolve().parent.parent.parent
SDK_MODULES = ("openai", "anthropic", "google.genai")

PROBE = """
import json, sys
import django
django.setup()
import agents.llm.registry
import agents.llm.base
import agents.services.turns
import probe.services
loaded = {"after_setup": [name for name in %(sdks)r if name in sys.modules]}
from agents.llm.registry import client_for_settings
from agents.llm.settings import ProviderSettings
client = client_for_settings(
    ProviderSettings(name="demo", kind="local_rules", base_url="", api_key="", timeout_seconds=5, max_retries=0)
)
loaded["after_local_rules"] = [name for name in %(sdks)r if name in sys.modules]
client_for_settings(
    ProviderSettings(name="o", kind="openai_chat", base_url="http://127.0.0.1:9/v1", api_key="k", timeout_seconds=5,
                     max_retries=0)
)
loaded["after_openai_chat"] = [name for name in %(sdks)r if name in sys.modules]
print(json.dumps(loaded))
"""


def run_fresh(code: str, *, env: dict[str, str] | None = None) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"} | (env or {})
    env["DJANGO_SETTINGS_MODULE"] = "amuxweb.settings.test"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_registry_and_resolving_local_rules_imports_no_provider_sdk():
    # when: a fresh process sets Django up, imports the registry and the code that calls it, and resolves the
    # embedded default's local_rules client, then an OpenAI chat client
    loaded = run_fresh(PROBE % {"sdks": SDK_MODULES})
    # then: no SDK until a provider of that kind is resolved, and then only that one
    assert loaded == {"after_setup": [], "after_local_rules": [], "after_openai_chat": ["openai"]}


# A worker's boot on a migrated database with an enabled Anthropic provider and a disabled Gemini one.
WORKER_BOOT = """
import json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from agents.models import Provider
Provider.objects.create(name="claude", kind="anthropic")
Provider.objects.create(name="gemini-off", kind="gemini", is_enabled=False)
before = [name for name in %(sdks)r if name in sys.modules]
from celery.signals import worker_init
worker_init.send(sender=None)
print(json.dumps({"before_boot": before, "after_boot": [name for name in %(sdks)r if name in sys.modules]}))
"""


def test_a_worker_boot_imports_the_sdks_of_the_enabled_provider_kinds_before_any_task(tmp_path):
    # when: a fresh process sends the signal a Celery worker sends before it forks its pool
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    loaded = run_fresh(WORKER_BOOT % {"sdks": SDK_MODULES}, env=env)
    # then: the configured kind's SDK is imported at boot (no task ever imports it under a time limit), only it
    assert loaded == {"before_boot": [], "after_boot": ["anthropic"]}


# An SDK whose import is interrupted half-way, after a module that refers back to a half-run one was finished:
# `halfsdk.types` imports `halfsdk.client`, which binds the still-running `halfsdk.types`; then the interruption.
HALF_SDK = {
    "halfsdk/__init__.py": "from halfsdk import types\n",
    "halfsdk/types.py": (
        "import halfsdk_switch\n"
        "from halfsdk import client\n"
        "if halfsdk_switch.interrupt:\n"
        "    halfsdk_switch.interrupt = False\n"
        "    raise halfsdk_switch.Interrupted('soft time limit')\n"
        "VALUE = 42\n"
    ),
    "halfsdk/client.py": "from halfsdk import types\n\ndef value():\n    return types.VALUE\n",
    "halfsdk_adapter.py": (
        "import halfsdk.client\n\nclass HalfClient:\n    def answer(self):\n        return halfsdk.client.value()\n"
    ),
}


@pytest.fixture
def half_sdk(tmp_path, monkeypatch):
    for relative, source in HALF_SDK.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(source)
    switch = types.ModuleType("halfsdk_switch")
    switch.interrupt = True
    switch.Interrupted = SoftTimeLimitExceeded
    monkeypatch.setitem(sys.modules, "halfsdk_switch", switch)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.ADAPTERS, "half", "halfsdk_adapter.HalfClient")
    yield
    for name in [name for name in sys.modules if name.startswith(("halfsdk", "halfsdk_adapter"))]:
        del sys.modules[name]


def test_an_adapter_import_interrupted_half_way_is_imported_afresh_on_the_next_turn(half_sdk):
    # given: the first turn's import of the SDK is interrupted by a soft time limit
    with pytest.raises(SoftTimeLimitExceeded):
        registry.adapter_class("half")
    # when: the next turn in the same worker process resolves the adapter again
    adapter = registry.adapter_class("half")
    # then: it works, not on a module the interruption left half-run
    assert adapter().answer() == 42
