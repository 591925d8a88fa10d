from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from amuxweb.dashboard.views import admin_index

api_v1 = [
    path("", include(("agents.urls", "agents"))),
    path("context/", include(("threadcontext.urls", "threadcontext"))),
]

urlpatterns = [
    # The dashboard is the admin's front page: matched before the admin's own index (which stays admin:index).
    path("admin/", admin.site.admin_view(admin_index), name="admin-dashboard"),
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_v1, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("feishu/", include(("amuxweb.feishu.urls", "feishu"))),
]

# An unknown URL under /api/ answers JSON like every other API error (amuxweb.api); elsewhere Django's page.
handler404 = "amuxweb.api.page_not_found"
