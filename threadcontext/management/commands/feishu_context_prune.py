"""`python manage.py feishu_context_prune`: remove thread context older than the retention now (C13)."""

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from threadcontext.services.retention import PRUNE_BATCH_SIZE, thread_context_expired_count, thread_context_prune


class Command(BaseCommand):
    help = "Delete thread-context events, items and decisions older than the retention (30 days)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=PRUNE_BATCH_SIZE)
        parser.add_argument("--no-progress", action="store_true", help="No progress bar (logs, cron).")

    def handle(self, *args, **options) -> None:
        if options["batch_size"] < 1:
            raise CommandError(f"--batch-size must be at least 1, not {options['batch_size']}.")
        expired = thread_context_expired_count()
        with tqdm(
            total=expired, unit="row", desc="pruning", file=self.stderr, disable=options["no_progress"]
        ) as progress:
            result = thread_context_prune(batch_size=options["batch_size"], on_progress=progress.update)
        self.stdout.write(
            f"Removed {result.events} events, {result.items} items and {result.decisions} decisions "
            f"({result.total} rows).\n"
        )
