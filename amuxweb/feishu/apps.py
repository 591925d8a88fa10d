from django.apps import AppConfig


class FeishuConfig(AppConfig):
    name = "amuxweb.feishu"
    label = "feishu"
    verbose_name = "Feishu bridge"
