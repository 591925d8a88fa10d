"""`python manage.py seed_demo`: the embedded default's demo data. Idempotent: a second run changes nothing."""

from django.core.management.base import BaseCommand
from django.db import transaction

from agents.services.demo import demo_seed

DEMO_CHAT_ID = "oc_demo"


class Command(BaseCommand):
    help = "Create the demo provider (local_rules), models, bots, Feishu workspace and threads; idempotent."

    def handle(self, *args, **options) -> None:
        # threadcontext is an interface of this command, not of agents (agents never imports it).
        from threadcontext.models import Workspace

        with transaction.atomic():
            demo = demo_seed()
            for bot in demo.bots:
                Workspace.objects.get_or_create(
                    bot_profile=bot.slug, chat_id=DEMO_CHAT_ID, defaults={"name": "Demo group"}
                )

        self.stdout.write(f"Demo bots: {', '.join(bot.slug for bot in demo.bots)} (owner {demo.owner.get_username()})")
        self.stdout.write(f"Demo Feishu workspace: chat {DEMO_CHAT_ID}")
        for thread in (demo.chat_thread, demo.automation_thread):
            self.stdout.write(
                f"{thread.runtime_mode} thread {thread.pk}: "
                f"/api/v1/threads/{thread.pk}/history/ and /api/v1/threads/{thread.pk}/context/"
            )
