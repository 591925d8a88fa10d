"""`python manage.py seed_demo`: the embedded default's demo data. Idempotent: a second run changes nothing.

It lives in the bridge because it composes two apps that never import each other: the agents demo (provider,
models, bots, threads) and each demo bot's Feishu workspace in threadcontext (ARCHITECTURE §3).
"""

from django.core.management.base import BaseCommand
from django.db import transaction

from agents.services.demo import demo_seed
from threadcontext.models import Workspace

DEMO_CHAT_ID = "oc_demo"


class Command(BaseCommand):
    help = "Create the demo provider (local_rules), models, bots, Feishu workspace and threads; idempotent."

    def handle(self, *args, **options) -> None:
        with transaction.atomic():
            demo = demo_seed()
            for bot in demo.bots:
                workspace, _ = Workspace.objects.get_or_create(
                    bot_profile=bot.slug, chat_id=DEMO_CHAT_ID, defaults={"name": "Demo group"}
                )
                # The demo shows the bots seeing each other's answers (issue 22): shared thread context on for
                # its workspace (the hub's default, off, stays as it is for real chats).
                if workspace.shared_thread_enabled is not True:
                    workspace.shared_thread_enabled = True
                    workspace.save(update_fields=["shared_thread_enabled"])

        self.stdout.write(f"Demo bots: {', '.join(bot.slug for bot in demo.bots)} (owner {demo.owner.get_username()})")
        self.stdout.write(f"Demo Feishu workspace: chat {DEMO_CHAT_ID} (shared thread context on)")
        for thread in (demo.chat_thread, demo.automation_thread):
            self.stdout.write(
                f"{thread.runtime_mode} thread {thread.pk}: "
                f"/api/v1/threads/{thread.pk}/history/ and /api/v1/threads/{thread.pk}/context/"
            )
