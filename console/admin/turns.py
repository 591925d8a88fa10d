"""The turns list with an "explain" link on every row (issue 27, finding 7): why a bot spoke is one click from
the list, not three. The explain page is the bridge's (feishu.admin), which agents' TurnAdmin may not know, so the
column is added here, on a subclass registered in its place (as the bot page is, in console.admin.dashboard)."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from agents.admin.turns import TurnAdmin
from agents.models import Turn


class TurnExplainedAdmin(TurnAdmin):
    list_display = [*TurnAdmin.list_display, "explain_link"]

    @admin.display(description=_("why"))
    def explain_link(self, turn: Turn) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:feishu_turn_explain", args=[turn.pk]), _("explain"))


admin.site.unregister(Turn)
admin.site.register(Turn, TurnExplainedAdmin)
