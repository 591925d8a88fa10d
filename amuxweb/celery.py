import os

from celery import Celery
from celery.signals import worker_process_init, worker_shutting_down

from core.worker_stop import pool_child_mark, threads_hand_back

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.production")

app = Celery("amuxweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# A stopped worker's pool child hands its running turn back instead of dying mid-turn (core.worker_stop).
worker_process_init.connect(pool_child_mark, weak=False)


@worker_shutting_down.connect(weak=False)
def _turns_hand_back(**_: object) -> None:
    """A stopping thread-pool worker (the Procfile's `turns`) hands back the turns its threads run (core.worker_stop)."""
    # Imported here: this module is loaded before Django is set up, and the handback loads models.
    from agents.services.turns.handback import turn_hand_back

    threads_hand_back(hand_back=turn_hand_back)
