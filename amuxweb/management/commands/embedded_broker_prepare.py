"""`python manage.py embedded_broker_prepare`: the embedded broker's file, tables and queues, before any process
that uses it starts (`make run` runs it after migrate; amuxweb/embedded_broker.py). Running it again changes
nothing; with REDIS_URL set it prepares nothing."""

from django.conf import settings
from django.core.management.base import BaseCommand

from amuxweb.celery import app
from amuxweb.embedded_broker import embedded_broker_prepare


class Command(BaseCommand):
    help = "Create the embedded broker's tables and a row for each task queue, before its workers start."
    # A step of `make run` right after migrate, which ran the system checks (they would load the URLconf here).
    requires_system_checks = []

    def handle(self, *args, **options) -> None:
        queues = embedded_broker_prepare(app=app)
        if queues:
            self.stdout.write(f"Embedded broker ready: {settings.CELERY_BROKER_URL} (queues: {', '.join(queues)})")
        else:
            self.stdout.write("The broker is not the embedded one (REDIS_URL is set): nothing to prepare.")
