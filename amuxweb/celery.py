import os

from celery import Celery
from celery.signals import worker_process_init

from core.worker_stop import pool_child_mark

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.production")

app = Celery("amuxweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# A stopped worker's pool child hands its running turn back instead of dying mid-turn (core.worker_stop).
worker_process_init.connect(pool_child_mark, weak=False)
