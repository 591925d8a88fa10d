from django.contrib import admin
from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path, re_path
from django.views.generic.base import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from console.apis import UsageApi
from console.dashboard.views import admin_index
from console.metrics.views import metrics
from core.api import api_not_found


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    # Resolved per request: the production manifest exists only after collectstatic, not when urls load.
    return HttpResponsePermanentRedirect(static("favicon.svg"))


api_v1: list[URLPattern | URLResolver] = [
    path("", include(("agents.urls", "agents"))),
    path("context/", include(("threadcontext.urls", "threadcontext"))),
    path("usage/", UsageApi.as_view(), name="usage"),
]

urlpatterns = [
    # The hub has no public pages: its front door is the operator console.
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False), name="home"),
    # Browsers ask for /favicon.ico whatever the page says; the icon itself is a static file.
    path("favicon.ico", favicon),
    path("i18n/", include("django.conf.urls.i18n")),  # set_language: the console's language switcher
    # The dashboard is the admin's front page: matched before the admin's own index (which stays admin:index).
    path("admin/", admin.site.admin_view(admin_index), name="admin-dashboard"),
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_v1, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("feishu/", include(("feishu.urls", "feishu"))),
    path("metrics", metrics, name="metrics"),  # Prometheus text (A10): docs/deploying.md, Monitoring
    # Any other /api/ URL: JSON 404 even with DEBUG on (handler404 below answers only when DEBUG is off).
    re_path(r"^api/", api_not_found),
]

# An unknown URL under /api/ answers JSON like every other API error (core.api); elsewhere Django's page.
handler404 = "core.api.page_not_found"
