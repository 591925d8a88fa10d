"""An automation run's answer posted to its Feishu chat (item 8), into the topic a /schedule was made in (K4); each
run admitted for its creator first, and a refused one stopped with one line to them (U4, feishu.channel.schedule_stops).
"""

from agents.models import Automation, Message, Turn
from agents.principals import Admission, Principal
from agents.services.turns.channels import AutomationChannel
from core.text import TranslatableText
from feishu.channel.schedule_stops import automation_run_admission, automation_stopped_tell
from feishu.channel.sending import bot_reply_format, rows_send
from feishu.outbound.delivery import OutgoingText, deliveries_prepare, feishu_notice_send


class FeishuAutomationChannel(AutomationChannel):
    """An automation run, posted to the automation's Feishu chat when it has one (item 8)."""

    @staticmethod
    def _chat_id(turn: Turn) -> str:
        automation = getattr(turn.thread, "automation", None)
        return automation.feishu_chat_id if automation is not None else ""

    @staticmethod
    def _topic_message_id(turn: Turn) -> str:
        """Issue 25: a /schedule made in a topic posts each run into that topic (a reply in thread to it)."""
        automation = getattr(turn.thread, "automation", None)
        return automation.feishu_topic_message_id if automation is not None else ""

    def run_admission(self, *, automation: Automation, principal: Principal, admission: Admission) -> Admission:
        return automation_run_admission(automation=automation, principal=principal, admission=admission)

    def run_stopped(self, *, automation: Automation, admission: Admission) -> None:
        automation_stopped_tell(automation=automation, rule=admission.rule)

    def deliver(self, *, turn: Turn, reply: Message) -> None:
        chat_id = self._chat_id(turn)
        if not chat_id:
            return
        topic_message_id = self._topic_message_id(turn)
        rows = deliveries_prepare(
            outgoing=OutgoingText(
                bot=turn.bot,
                turn=turn,
                chat_id=chat_id,
                reply_to_message_id=topic_message_id,
                reply_in_thread=bool(topic_message_id),
                text=reply.content,
                source_message_id=turn.source_message_id,
                reply_format=bot_reply_format(turn.bot),
            ),
            sending_now=True,
        )
        rows_send(rows=rows)

    def notice(self, *, turn: Turn, text: TranslatableText, purpose: str) -> None:
        chat_id = self._chat_id(turn)
        if chat_id:
            topic_message_id = self._topic_message_id(turn)
            feishu_notice_send(
                bot=turn.bot,
                chat_id=chat_id,
                reply_to_message_id=topic_message_id,
                reply_in_thread=bool(topic_message_id),
                text=text,
                purpose=purpose,
                source_key=turn.source_message_id,
            )
