"""The playground in the admin: groups (with their bots and reply modes) and the page that talks in them."""

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET, require_POST

from console.models import PlaygroundGroup, PlaygroundMember
from console.playground import views
from console.playground.services import playground_members_sync


class PlaygroundMemberInline(admin.TabularInline):
    model = PlaygroundMember
    extra = 1
    fields = ("bot", "reply_mode")


@admin.register(PlaygroundGroup)
class PlaygroundGroupAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "bot_names", "created_at", "open_link")
    fields = ("name", "kind")
    inlines = [PlaygroundMemberInline]

    @admin.display(description=_("bots"))
    def bot_names(self, obj: PlaygroundGroup) -> str:
        return ", ".join(member.bot.name for member in obj.members.all())  # prefetched in get_queryset

    @admin.display(description=_("playground"))
    def open_link(self, obj: PlaygroundGroup) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:playground_room", args=[obj.pk]), _("Open"))

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).prefetch_related("members__bot")

    def save_model(self, request, obj, form, change) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        playground_members_sync(group=form.instance)

    def response_add(self, request, obj, post_url_continue=None) -> HttpResponse:
        if "_continue" in request.POST or "_addanother" in request.POST:
            return super().response_add(request, obj, post_url_continue)
        return HttpResponseRedirect(reverse("admin:playground_room", args=[obj.pk]))

    def get_urls(self):
        def room(request: HttpRequest, group_id: int) -> HttpResponse:
            if not self.has_view_permission(request):
                raise PermissionDenied
            return views.room(request, group_id=group_id, context=self.admin_site.each_context(request))

        def state(request: HttpRequest, group_id: int) -> HttpResponse:
            if not self.has_view_permission(request):
                raise PermissionDenied
            return views.state(request, group_id=group_id)

        def post(request: HttpRequest, group_id: int) -> HttpResponse:
            if not self.has_change_permission(request):
                raise PermissionDenied
            return views.post(request, group_id=group_id)

        wrap = self.admin_site.admin_view
        return [
            path("<int:group_id>/room/", wrap(require_GET(room)), name="playground_room"),
            path("<int:group_id>/room/state/", wrap(require_GET(state)), name="playground_state"),
            path("<int:group_id>/room/post/", wrap(require_POST(post)), name="playground_post"),
            *super().get_urls(),
        ]
