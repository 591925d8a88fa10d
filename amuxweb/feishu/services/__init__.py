"""The bridge's services; callers import from here.

- intake: `inbound_event_store`, `inbound_events_sweep` (F2)
- routing: `inbound_event_process`, `inbound_message_route`
- turns: `feishu_turn_start(*, bot, message, trigger, activation_contract="") -> Turn | None` (d's discuss wake
  calls it); the Feishu channel of agents' one turn pipeline (`FeishuChannel`, registered in apps.ready())
- delivery: `deliveries_prepare`, `delivery_send`, `feishu_notice_send` (F3, F5)
"""

from amuxweb.feishu.services.delivery import deliveries_prepare, delivery_send, feishu_notice_send
from amuxweb.feishu.services.intake import inbound_event_store, inbound_events_reprocess, inbound_events_sweep
from amuxweb.feishu.services.routing import inbound_event_process, inbound_message_route
from amuxweb.feishu.services.turns import feishu_turn_start

__all__ = [
    "deliveries_prepare",
    "delivery_send",
    "feishu_notice_send",
    "feishu_turn_start",
    "inbound_event_process",
    "inbound_event_store",
    "inbound_events_reprocess",
    "inbound_events_sweep",
    "inbound_message_route",
]
