"""`python manage.py feishu_simulate --url http://127.0.0.1:8000 --bot SLUG [--script FILE] [--repeat N]`

Posts a scripted conversation to a running hub, each event signed and encrypted with the bot's own keys exactly
as Feishu sends it (for demos and load tests). The default script @-s the given bot in a topic and DMs it.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.models import Bot
from feishu.simulate import (
    DEFAULT_SCRIPT,
    PostResult,
    Reply,
    bot_local_credentials_provision,
    conversation_simulate,
    replies_wait,
    script_parse,
)


class Command(BaseCommand):
    help = "Post signed, encrypted Feishu events for a scripted conversation to a running hub."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="The hub's base URL.")
        parser.add_argument("--bot", required=True, help="Slug of the bot whose webhook receives the events.")
        parser.add_argument("--script", help="A script file (see feishu/simulate.py); default: a demo.")
        parser.add_argument("--chat", default="oc_demo", help="The group chat id (default: the demo workspace's).")
        parser.add_argument("--sender", default="ou_simulated_user", help="The sender's open_id.")
        parser.add_argument("--repeat", type=int, default=1, help="Run the script this many times (new ids each).")
        parser.add_argument(
            "--wait",
            type=float,
            default=60.0,
            help="Seconds to wait for the worker's replies and print their text (0: do not wait).",
        )
        parser.add_argument(
            "--provision",
            action="store_true",
            help="Demo only: give bots without a Feishu app local webhook credentials (replies are then recorded).",
        )

    def handle(self, *args, **options) -> None:
        bot = Bot.objects.filter(slug=options["bot"]).first()
        if bot is None:
            raise CommandError(f"No bot with slug {options['bot']!r}.")
        text = Path(options["script"]).read_text() if options["script"] else DEFAULT_SCRIPT.format(bot=bot.slug)
        try:
            steps = script_parse(text)
        except ValueError as error:
            raise CommandError(str(error)) from error
        slugs = {slug for step in steps for slug in step.mentions}
        bots = {b.slug: b for b in Bot.objects.filter(slug__in=slugs)}
        bots[bot.slug] = bot
        missing = slugs - set(bots)
        if missing:
            raise CommandError(f"Unknown bot(s) in the script: {', '.join(sorted(missing))}.")
        for each in bots.values():
            if options["provision"] and bot_local_credentials_provision(bot=each):
                self.stdout.write(f"provisioned local webhook credentials for {each.slug} (replies are recorded)")
        if not bot.feishu_verification_token:
            raise CommandError(
                f"Bot {bot.slug!r} has no Feishu verification token: set its Feishu app in the admin, "
                "or pass --provision for a local demo."
            )
        # @-mentions must carry the open_id the hub knows each bot by (F6).
        open_ids = {slug: b.feishu_bot_open_id or f"ou_bot_{b.feishu_app_id}" for slug, b in bots.items()}
        failures, posted = 0, []
        self.stdout.write(
            f"Posting {len(steps)} signed, encrypted events to {options['url']}/feishu/webhook/{bot.slug}/ "
            f"as Feishu would (chat {options['chat']}):"
        )
        self.stdout.write("status  time      kind    message id  text")
        for run in range(options["repeat"]):
            results = conversation_simulate(
                base_url=options["url"],
                bot=bot,
                steps=steps,
                chat_id=f"{options['chat']}_{run}" if options["repeat"] > 1 else options["chat"],
                sender_open_id=options["sender"],
                open_ids=open_ids,
            )
            posted += results
            for result in results:
                failures += result.status != 200
                self.stdout.write(
                    f"{result.status} {result.milliseconds:7.1f} ms  {result.step.kind:<7} {result.message_id}  "
                    f"{result.step.text[:60]}"
                )
        if failures:
            raise CommandError(f"{failures} event(s) were not acknowledged with 200.")
        if options["wait"] > 0:
            self.replies_show(posted, timeout=options["wait"])
        # Replies are made by the worker after the 200: where to read them, not a wait for them here.
        self.stdout.write(
            f"Done. The bots reply from the worker within seconds: {options['url']}/admin/feishu/outbounddelivery/ "
            "(a bot without a Feishu app has its replies recorded there), and each turn's explain page from "
            f"{options['url']}/admin/agents/turn/."
        )

    def replies_show(self, posted: list[PostResult], *, timeout: float) -> None:
        """Each reply's text under the message that asked for it (the worker makes them after the 200)."""
        self.stdout.write(f"Replies (waiting up to {timeout:g} s for the worker):")
        expected = {result.message_id for result in posted if result.step.kind in ("mention", "dm")}
        replies = replies_wait(message_ids=[result.message_id for result in posted], expected=expected, timeout=timeout)
        by_message: dict[str, list[Reply]] = {}
        for reply in replies:
            by_message.setdefault(reply.message_id, []).append(reply)
        for result in posted:
            for reply in by_message.get(result.message_id, []):
                head = f"{result.step.kind} {result.step.text[:40]!r} -> {reply.bot} ({reply.status})"
                body = "\n".join(f"    {line}" for line in (reply.text or "(no text)").splitlines())
                self.stdout.write(f"  {head}:\n{body}")
        missing = expected - {reply.message_id for reply in replies}
        if missing:
            self.stdout.write(f"  no turn yet for {len(missing)} message(s): is the worker running?")
