"""`python manage.py feishu_context_explain <root_msg_id> [--profile SLUG] [--message-id ID] [--decision-id ID]
[--verbose]`: why a bot got the context it got (ARCHITECTURE C12)."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.exceptions import ApplicationError
from threadcontext.explain import decision_explain_text
from threadcontext.selectors import decision_for_explain


class Command(BaseCommand):
    help = "Explain a thread-context decision: the latest for a topic root and bot profile, or one by id."
    # A read-only diagnosis: the system checks (`manage.py check`'s job) would load the URLconf, and with it DRF's
    # optional imports and drf-spectacular (~0.6 s of CPU, issue 11), to print a few lines from two tables.
    requires_system_checks = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("root_msg_id", help="The Feishu topic's root message id (om_...).")
        parser.add_argument("--profile", default="", help="The bot's slug (needed when several bots decided).")
        parser.add_argument("--message-id", default="", help="The request's message id (default: the latest).")
        parser.add_argument("--decision-id", type=int, default=None, help="One decision by id.")
        parser.add_argument("--verbose", action="store_true", help="Also print the thread context and prompt.")

    def handle(self, *args, **options) -> None:
        try:
            decision = decision_for_explain(
                root_msg_id=options["root_msg_id"],
                bot_profile=options["profile"],
                message_id=options["message_id"],
                decision_id=options["decision_id"],
            )
        except ApplicationError as error:
            raise CommandError(error.message) from None
        self.stdout.write(decision_explain_text(decision=decision, verbose=options["verbose"]), ending="")
