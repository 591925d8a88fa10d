import logging

from celery.signals import worker_init, worker_ready
from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save, pre_save
from django.utils.translation import gettext_lazy as _

from feishu import lark_modules_load


class FeishuConfig(AppConfig):
    name = "feishu"
    label = "feishu"
    verbose_name = _("Feishu bridge")

    def ready(self) -> None:
        # In ready(), not at the top: these modules load models, which raise AppRegistryNotReady before it.
        from agents.models import Bot, Thread
        from agents.services.turns import channel_register
        from feishu.channel.automation import FeishuAutomationChannel
        from feishu.channel.turn_channel import FeishuChannel
        from feishu.inbound.intake import bot_cache_forget
        from feishu.inbound.webhook_bots import bot_cache_forget as webhook_bot_cache_forget
        from threadcontext.services import bot_profile_forget, bot_profile_rename

        # The bridge's channels of the one turn pipeline (agents defines the port and never imports the bridge).
        channel_register(Thread.Channel.FEISHU, FeishuChannel())
        channel_register(Thread.Channel.AUTOMATION, FeishuAutomationChannel())

        def forget(sender, instance, **kwargs) -> None:
            bot_cache_forget(bot_pk=instance.pk)  # the intake worker's cache of an event's bot
            webhook_bot_cache_forget(bot_pk=instance.pk, slug=instance.slug)  # the webhook's, by slug

        # A Celery worker calls Feishu: lark-oapi is loaded as it starts, in the parent before the pool forks,
        # never inside a task (the WSGI app does the same in amuxweb/wsgi.py).
        worker_init.connect(_lark_modules_load, weak=False, dispatch_uid="feishu_lark_modules_load")
        # D2: a worker that starts after the hub was down catches up (once per hub start: feishu.inbound.hub_start).
        worker_ready.connect(_hub_start_catchup, weak=False, dispatch_uid="feishu_hub_start_catchup")

        # The webhook's and the intake worker's per-process bot caches: a save or delete here takes effect at once.
        post_save.connect(forget, sender=Bot, weak=False, dispatch_uid="feishu_webhook_bot_cache_save")
        post_delete.connect(forget, sender=Bot, weak=False, dispatch_uid="feishu_webhook_bot_cache_delete")

        # Issue 30, finding 5: threadcontext names a bot by slug; its records follow the bot, whichever way it is
        # deleted (the admin, a cascade from its owner) or renamed, so a later bot with the slug starts empty.
        def profile_forget(sender, instance, **kwargs) -> None:
            bot_profile_forget(bot_profile=instance.slug)

        def profile_rename(sender, instance, update_fields=None, **kwargs) -> None:
            if instance.pk is None or (update_fields is not None and "slug" not in update_fields):
                return
            old = Bot.objects.filter(pk=instance.pk).values_list("slug", flat=True).first()
            if old is not None and old != instance.slug:
                bot_profile_rename(old=old, new=instance.slug)

        post_delete.connect(profile_forget, sender=Bot, weak=False, dispatch_uid="feishu_bot_profile_forget")
        pre_save.connect(profile_rename, sender=Bot, weak=False, dispatch_uid="feishu_bot_profile_rename")


def _lark_modules_load(**kwargs) -> None:
    lark_modules_load()


def _hub_start_catchup(**kwargs) -> None:
    # Imported here: the signal handler runs after the app registry is ready; the module loads models.
    from feishu.inbound.hub_start import hub_start_catchup

    try:
        hub_start_catchup()
    except Exception:  # a database away at start must not stop the worker; the next start or the admin catches up
        logging.getLogger(__name__).exception("hub start catch-up failed")
