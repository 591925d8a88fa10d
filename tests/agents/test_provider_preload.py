"""Issue 11: a worker's boot imports the SDK of each provider kind an enabled provider has, and no other (each SDK
is 1-3 s of CPU and tens of MB in every worker). Run in a fresh interpreter, on the worker's own boot signal."""

import json
import os
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]

WORKER_BOOT_WITH_PROVIDERS = """
import json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from agents.models import Provider
Provider.objects.create(name="claude", kind=Provider.Kind.ANTHROPIC)
Provider.objects.create(name="gpt, switched off", kind=Provider.Kind.OPENAI_CHAT, is_enabled=False)
sdks = ("openai", "anthropic", "google.genai")
before = [name for name in sdks if name in sys.modules]
from celery.signals import worker_init
worker_init.send(sender=None)
print(json.dumps({"before": before, "after": [name for name in sdks if name in sys.modules]}))
"""


def test_the_worker_boot_imports_only_the_sdks_of_enabled_provider_kinds(tmp_path):
    # given: an enabled Anthropic provider and a disabled OpenAI one, in a fresh process's database
    env = {key: value for key, value in os.environ.items() if key not in ("PYTEST_CURRENT_TEST", "REDIS_URL")}
    env["DJANGO_SETTINGS_MODULE"] = "amuxweb.settings.test"
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    # when: the process sends the signal a Celery worker sends before it forks its pool
    result = subprocess.run(
        [sys.executable, "-c", WORKER_BOOT_WITH_PROVIDERS],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # then: Anthropic's SDK is loaded, OpenAI's (disabled) and google-genai's (no such provider) are not
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"before": [], "after": ["anthropic"]}
