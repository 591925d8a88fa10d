from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ProbeConfig(AppConfig):
    name = "probe"
    verbose_name = _("Probe gate")
