from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class FeishuConfig(AppConfig):
    name = "amuxweb.feishu"
    label = "feishu"
    verbose_name = _("Feishu bridge")

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from agents.models import Bot, Thread
        from agents.services.turns import channel_register
        from amuxweb.feishu.services.turns import FeishuAutomationChannel, FeishuChannel

        # The bridge's channels of the one turn pipeline (agents defines the port and never imports the bridge).
        channel_register(Thread.Channel.FEISHU, FeishuChannel())
        channel_register(Thread.Channel.AUTOMATION, FeishuAutomationChannel())

        def forget(sender, instance, **kwargs) -> None:
            from amuxweb.feishu.webhook import bot_cache_forget

            bot_cache_forget(bot_pk=instance.pk, slug=instance.slug)

        # The webhook's per-process bot cache: a save or delete in this process takes effect at once.
        post_save.connect(forget, sender=Bot, weak=False, dispatch_uid="feishu_webhook_bot_cache_save")
        post_delete.connect(forget, sender=Bot, weak=False, dispatch_uid="feishu_webhook_bot_cache_delete")
