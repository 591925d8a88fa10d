"""Settings of the hub processes the fault suite starts (web, worker, beat): the test settings, a real broker, and
short timeouts so "within the visibility timeout plus one sweep" is seconds, not the production minutes.

Everything else is the production path: DatabaseScheduler beat, acks_late tasks, the real lark-oapi client against
the Feishu stub (FEISHU_DOMAIN), the real OpenAI SDK against the LLM stub (the provider's base_url).
"""

from amuxweb.env import env
from amuxweb.settings.test import *  # noqa: F403
from amuxweb.settings.test import CELERY_BEAT_SCHEDULE

FEISHU_DOMAIN = env("FEISHU_DOMAIN")
# The suite's figures, set by tests/faults/conftest.py (the one place they are chosen): a killed worker's task comes
# back after VISIBILITY; beat runs both sweepers every SWEEP; an event still pending PENDING after it was stored is
# swept.
FAULTS_VISIBILITY_TIMEOUT_SECONDS = env.int("FAULTS_VISIBILITY_TIMEOUT_SECONDS")
FAULTS_SWEEP_SECONDS = env.float("FAULTS_SWEEP_SECONDS")
# How often a worker looks for tasks past the visibility timeout (production: every 10 s).
FAULTS_UNACKED_RESTORE_INTERVAL_SECONDS = 2
CELERY_BROKER_TRANSPORT_OPTIONS = {
    **CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
    "visibility_timeout": FAULTS_VISIBILITY_TIMEOUT_SECONDS,
    "unacked_restore_interval": FAULTS_UNACKED_RESTORE_INTERVAL_SECONDS,
}
# The visibility timeout must exceed the hard time limit (Redis would redeliver running tasks otherwise).
CELERY_TASK_TIME_LIMIT = FAULTS_VISIBILITY_TIMEOUT_SECONDS - 2
CELERY_TASK_SOFT_TIME_LIMIT = FAULTS_VISIBILITY_TIMEOUT_SECONDS - 5
# The bots of this suite have no tools; the tool budget must still fit the short soft limit (system check E001).
AMUX_TOOL_TIME_BUDGET_SECONDS = 2
AMUX_TOOL_CONNECT_TIMEOUT_SECONDS = 2
FEISHU_SWEEP_PENDING_AFTER_SECONDS = env.int("FAULTS_PENDING_AFTER_SECONDS")
CELERY_BEAT_SCHEDULE = {
    **CELERY_BEAT_SCHEDULE,
    "agents-turns-sweep": {**CELERY_BEAT_SCHEDULE["agents-turns-sweep"], "schedule": FAULTS_SWEEP_SECONDS},
    "feishu-inbound-sweep": {**CELERY_BEAT_SCHEDULE["feishu-inbound-sweep"], "schedule": FAULTS_SWEEP_SECONDS},
}
DATABASES["default"]["CONN_MAX_AGE"] = 60  # noqa: F405 - production's persistent connections, cut by a restart
LOGGING["root"]["level"] = "INFO"  # noqa: F405
