"""Start-up (issue 11): a process that never calls a provider never imports a provider SDK.

Importing openai, anthropic or google-genai costs seconds of CPU and tens of MB per process (web workers,
Celery workers, every management command). The registry resolves adapters by kind on first use; these tests
run a fresh interpreter, since this test process has long imported every SDK.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

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


def run_fresh(code: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTEST_CURRENT_TEST"}
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
