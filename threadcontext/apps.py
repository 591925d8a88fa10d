from django.apps import AppConfig


class ThreadContextConfig(AppConfig):
    name = "threadcontext"
    verbose_name = "Thread context"
