"""`python -m tests.agents.conversation_seed '<json>'`: the embedded-default conversation test's owner and bots, in
the hub's own database (run as a hub process; tests/agents/test_conversation_embedded.py).

One bot per queue mode, answering through the real OpenAI SDK at the LLM stub (`llm_base_url`); the steering one has
the MCP stub's echo tool (`mcp_url`), so its turns have a tool step. Prints the owner's API token and each bot's
slug by queue mode.
"""

import json
import sys

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

from agents.models import Bot, LLMModel, McpServer, Provider  # noqa: E402


def conversation_bots_create(*, llm_base_url: str, mcp_url: str) -> dict:
    owner, _ = get_user_model().objects.get_or_create(username="conversation-owner")
    provider = Provider.objects.create(
        name="conversation-llm",
        kind=Provider.Kind.OPENAI_CHAT,
        base_url=llm_base_url,
        api_key="sk-conversation",
        max_retries=0,
        timeout_seconds=60,
    )
    model = LLMModel.objects.create(
        provider=provider, name="gpt-4o", display_name="gpt-4o", max_output_tokens=256, supports_tool_calls=True
    )
    bots = {
        mode: Bot.objects.create(
            slug=f"conversation-{mode}", name=f"Conversation {mode}", owner=owner, primary_model=model, queue_mode=mode
        )
        for mode in Bot.QueueMode.values
    }
    McpServer.objects.create(
        bot=bots[Bot.QueueMode.STEER],
        name="stub",
        transport=McpServer.Transport.STREAMABLE_HTTP,
        url=mcp_url,
        allowed_tools=["echo"],
    )
    return {"token": Token.objects.get_or_create(user=owner)[0].key, "bots": {m: b.slug for m, b in bots.items()}}


if __name__ == "__main__":
    print(json.dumps(conversation_bots_create(**json.loads(sys.argv[1]))))
