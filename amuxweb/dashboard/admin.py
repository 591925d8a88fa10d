"""The Bot page with what only the hub can tell: the webhook URL to paste into Feishu, what `inherit` resolves to
right now, and the bot's recent turns and judgements. agents never imports probe or the bridge, so the page that
shows them lives here, as a subclass of agents' BotAdmin (its fields, form and lists unchanged)."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from agents.admin.core import BotAdmin
from agents.models import Bot
from amuxweb.dashboard.selectors import bot_overview_get


class BotOverviewAdmin(BotAdmin):
    change_form_template = "admin/dashboard/bot_change_form.html"

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None) -> HttpResponse:
        bot = self.get_object(request, object_id)
        if bot is not None:
            extra_context = {**(extra_context or {}), "bot_overview": bot_overview_get(bot=bot, request=request)}
        return super().change_view(request, object_id, form_url, extra_context)


admin.site.unregister(Bot)
admin.site.register(Bot, BotOverviewAdmin)
