"""The API token admin: staff see that a token exists and whose it is, never its key (issue 30, finding 1).

rest_framework.authtoken's stock admin lists every key to anyone with `view_tokenproxy`, who could then act as
any user over REST. It is replaced here. Nobody creates or edits another user's token: a key is shown once, at
creation, to its owner, on "Your API token" (`mine/`, open to every active staff user for their own token).
`manage.py ensure_admin` prints the admin user's token, to the operator who owns that user.
"""

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from rest_framework.authtoken.models import TokenProxy

from agents.services.tokens import api_token_replace


class TokenByUserChangeList(ChangeList):
    # The key is the token's primary key: a row links to its owner's id instead, so no URL carries a key.
    def url_for_result(self, result: Model) -> str:
        assert isinstance(result, TokenProxy)  # this change list is TokenProxy's
        opts = self.opts
        return reverse(
            f"admin:{opts.app_label}_{opts.model_name}_change",
            args=(quote(result.user_id),),
            current_app=self.model_admin.admin_site.name,
        )


def token_words(token: TokenProxy) -> str:
    return gettext("API token of %(user)s") % {"user": token.user}


# Token.__str__ is the key, and the admin puts an object's str in titles, history, the delete confirmation and
# the log. The proxy the admin uses gets its own; REST authentication uses Token, which is untouched.
TokenProxy.__str__ = token_words  # type: ignore[method-assign,assignment]

admin.site.unregister(TokenProxy)


@admin.register(TokenProxy)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["user", "key_state", "created"]
    list_filter = ["created"]
    fields = ["user", "key_state", "created"]
    readonly_fields = ["key_state", "created"]
    search_fields = [f"user__{User.USERNAME_FIELD}"]
    ordering = [f"user__{User.USERNAME_FIELD}"]
    list_select_related = ["user"]
    actions = None  # the stock bulk delete would show each token's key (its primary key) on its confirmation page

    def get_changelist(self, request: HttpRequest, **kwargs):
        return TokenByUserChangeList

    def get_object(self, request: HttpRequest, object_id: str, from_field=None):
        queryset = self.get_queryset(request)
        try:
            return queryset.get(user__pk=User._meta.pk.to_python(object_id))
        except (queryset.model.DoesNotExist, ValidationError, ValueError):
            return None

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    @admin.display(description=_("key"))
    def key_state(self, token: TokenProxy) -> str:
        return gettext("set (shown once, to its owner, at creation)")

    def get_urls(self):
        mine = path("mine/", self.admin_site.admin_view(self.mine_view), name="authtoken_tokenproxy_mine")
        return [mine, *super().get_urls()]

    def mine_view(self, request: HttpRequest) -> HttpResponse:
        """The viewer's own token: its existence on GET; a POST replaces it and shows the new key this once."""
        user = request.user
        assert isinstance(user, User)  # admin_view lets only a logged-in staff user in
        new_key = api_token_replace(user=user) if request.method == "POST" else None
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Your API token"),
            "opts": self.model._meta,
            "has_token": new_key is not None or TokenProxy.objects.filter(user=user).exists(),
            "new_key": new_key,
        }
        return TemplateResponse(request, "admin/authtoken/mine.html", context)
