"""Shared factory-boy factories for the agents models; other apps' tests import them.

A message's visibility mask is derived from its thread's runtime mode (V4), never chosen by a factory.
"""

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from agents.models import Bot, LLMModel, Message, Provider, Thread
from agents.visibility import message_mask


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    password = factory.django.Password("pw-not-secret-123")
    is_staff = False


def staff_user(username: str, *permissions: str):
    """A staff user holding exactly `permissions` ("app.codename" each): being staff alone shows nobody else's rows
    (U6), the permissions do."""
    user = UserFactory(username=username, is_staff=True)
    for permission in permissions:
        app_label, codename = permission.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return user


class ProviderFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Provider

    name = factory.Sequence(lambda n: f"provider-{n}")
    kind = Provider.Kind.LOCAL_RULES
    base_url = ""
    api_key = ""


class LLMModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LLMModel

    provider = factory.SubFactory(ProviderFactory)
    name = factory.Sequence(lambda n: f"model-{n}")
    display_name = factory.LazyAttribute(lambda model: model.name)
    context_window = 0
    max_output_tokens = 4096
    supports_tool_calls = False


class BotFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Bot

    slug = factory.Sequence(lambda n: f"bot-{n}")
    name = factory.LazyAttribute(lambda bot: bot.slug.replace("-", " ").title())
    owner = factory.SubFactory(UserFactory)
    primary_model = factory.SubFactory(LLMModelFactory)
    system_prompt = ""


class ThreadFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Thread

    bot = factory.SubFactory(BotFactory)
    runtime_mode = Thread.RuntimeMode.CHAT
    channel = factory.LazyAttribute(
        lambda thread: (
            Thread.Channel.AUTOMATION if thread.runtime_mode == Thread.RuntimeMode.AUTOMATION else Thread.Channel.REST
        )
    )
    title = factory.Sequence(lambda n: f"thread {n}")
    external_key = ""


class MessageFactory(factory.django.DjangoModelFactory):
    """Derives the mask from the thread like agents.services.threads.message_create does (V4)."""

    class Meta:
        model = Message

    thread = factory.SubFactory(ThreadFactory)
    kind = Message.Kind.USER_MESSAGE
    visibility_mask = factory.LazyAttribute(
        lambda message: message_mask(runtime_mode=message.thread.runtime_mode, kind=message.kind)
    )
    content = factory.Sequence(lambda n: f"message {n}")
    prompt = ""
    author = ""
    external_message_id = ""
    usage = factory.LazyFunction(dict)
