from celery.signals import worker_init
from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

from agents.tools import checks  # noqa: F401 - registers the tool loop's system checks


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = _("Agents")

    def ready(self) -> None:
        # Not at the top: the registry imports agents.models, which cannot load while Django is still importing
        # the apps' configs; ready() is where Django allows it.
        from agents.llm.registry import provider_adapters_preload
        from agents.mcp.isolation import process_environment_hide

        def preload(**kwargs) -> None:
            provider_adapters_preload()

        # A Celery worker imports the SDKs of the configured provider kinds as it starts, in the parent before
        # the pool forks, never inside a task, where a soft time limit could interrupt the import.
        # Every hub process (web, worker, beat) hides its environment from the stdio MCP servers a worker starts
        # (issue 30): they run as the hub's user and could otherwise read /proc/<hub pid>/environ.
        process_environment_hide()
        worker_init.connect(preload, weak=False, dispatch_uid="agents_provider_adapters_preload")
