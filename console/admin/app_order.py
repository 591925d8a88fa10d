"""The admin's app list in the hub's order, the same in every language (issue 27, finding 5).

Django sorts apps by their translated names, so in zh-hans and ja the untranslatable "Axes" came first and the
hub's own apps were scattered by code point. The hub's apps come first, in the order an operator works through
them, then the framework's; an app this list does not know goes last, by name."""

from django.contrib import admin

APP_ORDER = (
    "agents",
    "feishu",
    "threadcontext",
    "probe",
    "playground",
    "auth",
    "authtoken",
    "axes",
    "django_celery_beat",
)
_stock_get_app_list = admin.site.get_app_list


def app_list_in_hub_order(request, app_label=None) -> list[dict]:
    apps = _stock_get_app_list(request, app_label)
    rank = {label: index for index, label in enumerate(APP_ORDER)}
    return sorted(apps, key=lambda app: (rank.get(app["app_label"], len(APP_ORDER)), app["name"].lower()))


admin.site.get_app_list = app_list_in_hub_order  # type: ignore[method-assign]  # the one site of the hub
