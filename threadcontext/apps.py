from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ThreadContextConfig(AppConfig):
    name = "threadcontext"
    verbose_name = _("Thread context")
