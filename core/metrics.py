"""Counters of things that happen inside a process and leave no row behind (A10): the send budget's waits.

Everything the database already records (turns, judgements, inbound events, deliveries, connections) is read
from it when /metrics is scraped (console.metrics), so it is the same number on every node. What is left is
counted here with prometheus-client in its multi-process mode: each process (gunicorn workers, Celery pool
children, the long connection) writes its own small file under PROMETHEUS_MULTIPROC_DIR, and the scrape sums them.

prometheus_client picks its value store from the environment when first imported; this module sets the directory
from the settings and then has the library pick again, so the order in which modules were imported does not matter.
"""

import os

from django.conf import settings

os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(settings.PROMETHEUS_MULTIPROC_DIR))
os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

from prometheus_client import CollectorRegistry, Counter, values  # noqa: E402  (after the directory is set)
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

values.ValueClass = values.get_value_class()  # the multi-process store, even if the library was loaded before

SEND_BUDGET_WAITS = Counter(
    "amux_send_budget_waits",
    "Final sends that waited for the send budget (R4) before going to Feishu.",
)
SEND_BUDGET_WAIT_SECONDS = Counter(
    "amux_send_budget_wait_seconds",
    "Seconds final sends spent waiting for the send budget (R4).",
)


def send_budget_wait_record(seconds: float) -> None:
    """Count one final send that had to wait `seconds` (> 0) for its budget."""
    SEND_BUDGET_WAITS.inc()
    SEND_BUDGET_WAIT_SECONDS.inc(seconds)


def process_counters_registry() -> CollectorRegistry:
    """A fresh registry holding every process's counters, summed from their files (for one scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=os.environ["PROMETHEUS_MULTIPROC_DIR"])
    return registry
