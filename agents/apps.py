from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = _("Agents")

    def ready(self) -> None:
        from agents.tools import checks  # noqa: F401 - registers the tool loop's system checks
