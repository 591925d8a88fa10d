"""The Bot page with what only the hub can tell: the webhook URL to paste into Feishu, what `inherit` resolves to
right now, and the bot's recent turns and judgements. agents never imports probe or the bridge, so the page that
shows them lives here, as a subclass of agents' BotAdmin (its fields, form and lists unchanged)."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from agents.admin.bots import BotAdmin
from agents.models import Bot
from console.dashboard.bot_overview import bot_overview_get
from console.dashboard.costs import WINDOWS
from console.dashboard.setup import bot_setup_get
from core.admin import TranslatableText, list_url, related_links
from core.tasks_enqueue import task_enqueue
from feishu.inbound.catchup_runs import catchup_now
from feishu.outbound.verify import feishu_credentials_verify
from feishu.tasks import feishu_credentials_verify_task
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
        (list_url("agents.voicetranscription", bot__id__exact=bot.pk), _("voice transcriptions")),
    ]


# A save that changes one of these checks the app against Feishu again (A6).
CREDENTIAL_FIELDS = {"feishu_app_id", "feishu_app_secret", "feishu_app_secret_clear"}


class BotOverviewAdmin(BotAdmin):
    change_form_template = "admin/dashboard/bot_change_form.html"
    actions = ["catch_up"]

    @admin.action(description=_("Catch up with the messages the hub missed (last 24 h)"), permissions=["change"])
    def catch_up(self, request: HttpRequest, queryset) -> None:
        # D2: read each active group's messages since the newest stored one and store what was missed.
        for bot in queryset:
            catchup = catchup_now(bot=bot)
            if catchup.error:  # Feishu said no (a missing scope, say): the page says why, no 500
                self.message_user(request, f"{bot.slug}: {catchup.error}", messages.ERROR)
                continue
            self.message_user(
                request,
                _("%(bot)s: %(read)d message(s) read in %(chats)d group(s), %(stored)d new.")
                % {"bot": bot.slug, "read": catchup.read, "chats": catchup.chats, "stored": catchup.stored},
                messages.SUCCESS,
            )

    def get_urls(self):
        own = [
            path("<path:object_id>/setup/", self.admin_site.admin_view(self.setup_view), name="agents_bot_setup"),
            path("<path:object_id>/verify/", self.admin_site.admin_view(self.verify_view), name="agents_bot_verify"),
        ]
        return own + super().get_urls()

    def _bot_or_404(self, request: HttpRequest, object_id: str, *, change: bool = False) -> Bot:
        bot = self.get_object(request, object_id)
        if bot is None:
            raise Http404
        allowed = self.has_change_permission(request, bot) if change else self.has_view_permission(request, bot)
        if not allowed:
            raise PermissionDenied
        return bot

    def setup_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A8: everything a newcomer needs to connect this bot to a real Feishu app, on one page."""
        bot = self._bot_or_404(request, object_id)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": bot,
            "title": gettext("Connect %(bot)s to Feishu") % {"bot": bot.name},
            "setup": bot_setup_get(bot=bot, request=request),
            "may_verify": self.has_change_permission(request, bot),
        }
        return TemplateResponse(request, "admin/dashboard/bot_setup.html", context)

    @method_decorator(require_POST)
    def verify_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The "verify" button: checks the credentials against Feishu now, says what Feishu answered."""
        bot = self._bot_or_404(request, object_id, change=True)
        check = feishu_credentials_verify(bot=bot)
        if check.ok:
            message = gettext("Feishu accepted the credentials: app %(app)s, bot open id %(open_id)s.") % {
                "app": check.app_name or "?",
                "open_id": check.open_id or "?",
            }
            self.message_user(request, message, messages.SUCCESS)
        else:
            self.message_user(
                request,
                gettext("Feishu refused the credentials: %(detail)s") % {"detail": gettext(check.detail)},
                messages.ERROR,
            )
        back = request.POST.get("next", "")
        if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
            back = reverse("admin:agents_bot_setup", args=[bot.pk])
        return HttpResponseRedirect(back)

    def save_model(self, request: HttpRequest, obj: Bot, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if obj.has_feishu_credentials and (not change or CREDENTIAL_FIELDS & set(form.changed_data)):
            bot_id = obj.pk
            transaction.on_commit(
                lambda: task_enqueue(task=feishu_credentials_verify_task, args=[bot_id], what="credentials verify")
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
                "cost_kinds": [
                    ("primary", _("Primary model")),
                    ("probe", _("Discuss probe")),
                    ("summary", _("Context summaries")),
                    ("total", _("Total")),
                ],
                "cost_windows": [name for name, _span in WINDOWS],
            }
        return super().change_view(request, object_id, form_url, extra_context)


admin.site.unregister(Bot)
admin.site.register(Bot, BotOverviewAdmin)
