"""`manage.py feishu_connect [--bot SLUG ...]`: Feishu intake over the long connection (G6).

Supervises one child process per enabled bot whose event mode is "long connection" (see
feishu.inbound.longconn for why one process per app). Runs until SIGTERM or Ctrl-C, which stop every child.
"""

import argparse
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from feishu.inbound.longconn import long_connection_child_run
from feishu.inbound.supervisor import LongConnectionSupervisor, child_command_for, long_connection_bots_list


class Command(BaseCommand):
    help = "Receive Feishu events over the long connection for every bot whose event mode is 'long connection'."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--bot", action="append", default=[], metavar="SLUG", help="Only these bots (repeat).")
        # Internal: the supervisor starts one `--child <bot pk>` process per bot.
        parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)

    def handle(self, *args, bot: list[str], child: int | None, **options) -> None:
        if child is not None:
            sys.exit(long_connection_child_run(bot_pk=child))
        slugs = tuple(bot)
        supervisor = LongConnectionSupervisor(
            child_command=child_command_for(manage_py=str(Path(sys.argv[0]).resolve())),
            slugs=slugs,
            reconcile_seconds=settings.FEISHU_LONG_CONNECTION_RECONCILE_SECONDS,
        )
        bots = long_connection_bots_list(slugs=slugs)
        self.stdout.write(
            f"feishu_connect: {len(bots)} long-connection bot(s) now ("
            + (", ".join(b.slug for b in bots) or "none")
            + f"); bots switched to it in the admin are picked up within "
            f"{settings.FEISHU_LONG_CONNECTION_RECONCILE_SECONDS:g} s. Ctrl-C stops."
        )
        supervisor.run(bots_list=lambda: long_connection_bots_list(slugs=slugs))
