"""The Bot page with what only the hub can tell: the webhook URL to paste into Feishu, what `inherit` resolves to
right now, and the bot's recent turns and judgements. agents never imports probe or the bridge, so the page that
shows them lives here, as a subclass of agents' BotAdmin (its fields, form and lists unchanged)."""

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy as _

from agents.admin.bots import BotAdmin
from agents.models import Bot
from console.dashboard.bot_overview import bot_overview_get
from core.admin import TranslatableText, list_url, related_links
from feishu.inbound.catchup import catchup_run
from feishu.outbound.api_errors import FeishuApiError
from probe.admin import cause_explained


def bot_neighbours(bot: Bot) -> list[tuple[str, TranslatableText]]:
    """Every list of the bot's records, filtered to it: one click from its page to its wakes, deliveries, ..."""
    return [
        (list_url("agents.turn", bot__id__exact=bot.pk), _("turns")),
        (list_url("probe.probejudgement", bot__id__exact=bot.pk), _("judgements")),
        (list_url("feishu.discusswake", bot__id__exact=bot.pk), _("discuss wakes")),
        (list_url("feishu.outbounddelivery", bot__id__exact=bot.pk), _("deliveries")),
        (list_url("feishu.inboundevent", bot__id__exact=bot.pk), _("inbound events")),
        (list_url("threadcontext.workspace", bot_profile=bot.slug), _("workspaces")),
        (list_url("threadcontext.threadcontextdecision", bot_profile=bot.slug), _("context decisions")),
        (list_url("agents.thread", bot__id__exact=bot.pk), _("threads")),
    ]


class BotOverviewAdmin(BotAdmin):
    change_form_template = "admin/dashboard/bot_change_form.html"
    actions = ["catch_up"]

    @admin.action(description=_("Catch up with the messages the hub missed (last 24 h)"), permissions=["change"])
    def catch_up(self, request: HttpRequest, queryset) -> None:
        # D2: read each active group's messages since the newest stored one and store what was missed.
        for bot in queryset:
            try:
                result = catchup_run(bot=bot)
            except FeishuApiError as error:  # Feishu said no (a missing scope, say): the page says why, no 500
                self.message_user(request, f"{bot.slug}: {error}", messages.ERROR)
                continue
            self.message_user(
                request,
                _("%(bot)s: %(read)d message(s) read in %(chats)d group(s), %(stored)d new.")
                % {"bot": bot.slug, "read": result.read, "chats": result.chats, "stored": result.stored},
                messages.SUCCESS,
            )

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None) -> HttpResponse:
        bot = self.get_object(request, object_id)
        if bot is not None:
            overview = bot_overview_get(bot=bot, request=request)
            extra_context = {
                **(extra_context or {}),
                "bot_overview": overview,
                "bot_probe_cause": cause_explained(overview.probe_cause) if overview.probe_cause else "",
                "bot_related": related_links(bot_neighbours(bot)),
            }
        return super().change_view(request, object_id, form_url, extra_context)


admin.site.unregister(Bot)
admin.site.register(Bot, BotOverviewAdmin)
