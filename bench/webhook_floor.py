"""The webhook bench's floor: a view that commits one row to the webhook's table, and nothing else (issue 11).

Served only by the bench's own server (settings `bench.webhook_settings`, URLconf `bench.webhook_urls`), never by
the hub: it writes rows for any caller. It reads the request body exactly as the webhook does, then commits one
`feishu_inboundevent` row whose payload is the size of the one the webhook stores for the bench's events, with
one parameterised INSERT on Django's connection (the same CONN_MAX_AGE, autocommit, server and database), and
answers the webhook's own 200. Whatever the webhook costs above this view is work other than the durable write.
"""

import itertools
import json
import os

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.models import Bot
from feishu.inbound.signing import mention_entry, message_event_payload
from feishu.models import InboundEvent

_MESSAGE_ID = "om_bench_000000"  # as long as the bench's own ids, replaced per row
_counter = itertools.count()
_bot_pks: dict[str, int] = {}


def stored_payload_template() -> str:
    """The JSON the webhook stores for one bench event (the header without its token), with a placeholder id."""
    payload = message_event_payload(
        verification_token="bench-token",
        app_id="cli_bench",
        message_id=_MESSAGE_ID,
        chat_id="oc_bench",
        text="@_user_1 question 000000",
        mentions=[mention_entry(index=1, open_id="ou_bench_bot", name="Bench")],
    )
    payload["header"].pop("token")
    return json.dumps(payload, ensure_ascii=False)


_TEMPLATE_HEAD, _TEMPLATE_TAIL = stored_payload_template().split(_MESSAGE_ID)
# Every column of the row, so it is the same row whatever the model grows: the request's values, else the defaults.
_FIELDS = tuple(field for field in InboundEvent._meta.concrete_fields if not field.primary_key)
_PER_REQUEST = ("bot", "event_id", "message_id", "event_type", "payload", "received_at")
_DEFAULTS = {field.name: field.get_default() for field in _FIELDS if field.name not in _PER_REQUEST}
_INSERT = (
    f'INSERT INTO "{InboundEvent._meta.db_table}" ({", ".join(chr(34) + field.column + chr(34) for field in _FIELDS)})'
    f" VALUES ({', '.join(['%s'] * len(_FIELDS))})"
)


@csrf_exempt
@require_POST
def floor(request: HttpRequest, bot_slug: str) -> HttpResponse:
    request.body  # noqa: B018 - read as the webhook reads it
    bot_pk = _bot_pks.get(bot_slug)
    if bot_pk is None:
        bot_pk = _bot_pks[bot_slug] = Bot.objects.values_list("pk", flat=True).get(slug=bot_slug)
    message_id = f"om_floor_{os.getpid()}_{next(_counter)}"  # unique across the server's workers
    values = {
        "bot": bot_pk,
        "event_id": f"floor_{message_id}",
        "message_id": message_id,
        "event_type": "im.message.receive_v1",
        "payload": _TEMPLATE_HEAD + message_id + _TEMPLATE_TAIL,  # JSON text, as the column's literal
        "received_at": timezone.now(),
        **_DEFAULTS,
    }
    with connection.cursor() as cursor:
        cursor.execute(_INSERT, [values[field.name] for field in _FIELDS])
    return JsonResponse({"msg": "success"})
