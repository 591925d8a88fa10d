from django.apps import AppConfig


class ProbeConfig(AppConfig):
    name = "probe"
    verbose_name = "Probe gate"
