from django.apps import AppConfig


class DashboardConfig(AppConfig):
    # No models: an app so the admin's autodiscovery imports amuxweb.dashboard.admin (after agents and probe).
    name = "amuxweb.dashboard"
    label = "dashboard"
    verbose_name = "Dashboard"
