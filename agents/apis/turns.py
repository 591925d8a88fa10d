"""REST chat: post a message to a thread (202, the turn runs in a worker) and read a turn's status."""

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.apis.threads import ERROR_RESPONSE, MessageOutputSerializer
from agents.models import Bot, Thread, ToolApprovalDecision, Turn
from agents.selectors import POST_MESSAGE, thread_get, turn_decision_allowed, turn_get
from agents.services.turns import REST_MESSAGE_MAX_CHARS, rest_message_post
from agents.services.turns.approvals import approval_decide, approval_pending_for, approval_summary
from core.exceptions import ConflictError, ForbiddenError

# The schema says what trim_whitespace + allow_blank=False enforce: at least one character that is not blank.
NOT_BLANK = RegexValidator(r"\S", message="content cannot be blank.")


class StrictCharField(serializers.CharField):
    """A CharField that refuses a JSON number or boolean (DRF's would store 123 as "123"): content is text."""

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class MessagePostInputSerializer(serializers.Serializer):
    content = StrictCharField(
        max_length=REST_MESSAGE_MAX_CHARS, trim_whitespace=True, allow_blank=False, validators=[NOT_BLANK]
    )


class MessagePostOutputSerializer(serializers.Serializer):
    message = MessageOutputSerializer()
    turn_id = serializers.IntegerField()


class ApprovalDecisionOutputSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=ToolApprovalDecision.Outcome.choices)
    via = serializers.ChoiceField(choices=ToolApprovalDecision.Via.choices)
    decided_by = serializers.CharField()
    decided_at = serializers.DateTimeField()


class ApprovalOutputSerializer(serializers.Serializer):
    """A tool call that needs a person's approval (H1); the arguments redacted and cut as the card shows them."""

    id = serializers.IntegerField()
    server = serializers.CharField()
    tool = serializers.CharField()
    arguments = serializers.CharField()
    requested_by = serializers.CharField()
    expires_at = serializers.DateTimeField()
    decision = ApprovalDecisionOutputSerializer(allow_null=True)


class AdmissionOutputSerializer(serializers.Serializer):
    allowed = serializers.BooleanField()
    door = serializers.CharField()
    rule = serializers.CharField()
    reason = serializers.CharField()


class PrincipalOutputSerializer(serializers.Serializer):
    """U1: the person a turn acts for (a Feishu user's ids, or a hub user's id) and U2's decision at its door."""

    open_id = serializers.CharField()
    union_id = serializers.CharField()
    user = serializers.IntegerField(allow_null=True)
    admission = AdmissionOutputSerializer()


class TurnOutputSerializer(serializers.ModelSerializer):
    bot: serializers.SlugRelatedField[Bot] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    reply = MessageOutputSerializer(source="reply_message", allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    pending_approval = serializers.SerializerMethodField()
    approvals = serializers.SerializerMethodField()

    @extend_schema_field(ApprovalOutputSerializer(allow_null=True))
    def get_pending_approval(self, turn: Turn) -> dict | None:
        if turn.status != Turn.Status.AWAITING_APPROVAL:
            return None
        approval = approval_pending_for(turn=turn)
        return approval_summary(approval) if approval is not None else None

    @extend_schema_field(ApprovalOutputSerializer(many=True))
    def get_approvals(self, turn: Turn) -> list[dict]:
        return [approval_summary(a) for a in turn.approvals.select_related("decision").order_by("step", "index")]

    # U1/U2: who the turn acts for, and the door's decision that let it run.
    principal = serializers.SerializerMethodField()

    @extend_schema_field(PrincipalOutputSerializer)
    def get_principal(self, turn: Turn) -> dict:
        return {
            "open_id": turn.principal_open_id,
            "union_id": turn.principal_union_id,
            "user": turn.principal_user_id,
            "admission": turn.admission or {},
        }

    # Queue mode collect (O2): a skipped turn names the turn whose reply answered its message, and that turn lists
    # the turns it answered besides its own.
    answered_by = serializers.SerializerMethodField()
    answers_also = serializers.SerializerMethodField()

    class Meta:
        model = Turn
        fields = [
            "id",
            "bot",
            "thread",
            "trigger",
            "status",
            "error",
            "attempts",
            "redaction_count",
            "user_message",
            "reply",
            "usage",
            "queued_at",
            "started_at",
            "finished_at",
            "duration_ms",
            "pending_approval",
            "approvals",
            "answered_by",
            "answers_also",
            "principal",
        ]
        read_only_fields = fields

    def get_answered_by(self, turn: Turn) -> int | None:
        collected_into = (turn.channel_state or {}).get("collected_into")
        return int(collected_into) if collected_into is not None else None

    def get_answers_also(self, turn: Turn) -> list[int]:
        return [int(turn_id) for turn_id in (turn.channel_state or {}).get("collected", [])]


def thread_post_refusal(*, thread: Thread) -> str | None:
    """Why REST may not post into `thread`, or None: only the REST channel's live threads take REST messages.

    A Feishu thread's people would never see the message or its reply (it would still enter their thread's
    context), an automation thread is driven by its schedule, and a retired thread takes no new turns.
    """
    if thread.retired_at is not None:
        return "This thread is retired; start a new thread to post."
    if thread.channel == Thread.Channel.FEISHU:
        return "This thread belongs to a Feishu chat; post in Feishu instead."
    if thread.channel != Thread.Channel.REST:
        return (
            f"This thread belongs to the {thread.get_channel_display()} channel; only REST threads take REST messages."
        )
    return None


class ThreadMessagePostApi(APIView):
    @extend_schema(
        operation_id="threads_messages_create",
        summary="Post a user message; the bot's turn is queued and its reply appears in /history.",
        request=MessagePostInputSerializer,
        responses={202: MessagePostOutputSerializer, 400: ERROR_RESPONSE, 404: ERROR_RESPONSE, 409: ERROR_RESPONSE},
    )
    def post(self, request: Request, thread_id: int) -> Response:
        thread = thread_get(user=request.user, thread_id=thread_id, permissions=POST_MESSAGE)
        serializer = MessagePostInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        refusal = thread_post_refusal(thread=thread)
        if refusal is not None:
            raise ConflictError(refusal, extra={"thread_id": thread.pk, "channel": thread.channel})
        message, turn = rest_message_post(
            thread=thread,
            content=serializer.validated_data["content"],
            author=request.user.get_username(),
            user_id=request.user.pk,
        )
        body = {"message": MessageOutputSerializer(message).data, "turn_id": turn.pk}
        return Response(body, status=status.HTTP_202_ACCEPTED)


class TurnDetailApi(APIView):
    @extend_schema(
        operation_id="turns_retrieve",
        summary="One turn: its status (queued, running, delivered, failed, ...), reply, usage and times.",
        responses={200: TurnOutputSerializer, 404: ERROR_RESPONSE},
    )
    def get(self, request: Request, turn_id: int) -> Response:
        return Response(TurnOutputSerializer(turn_get(user=request.user, turn_id=turn_id)).data)


PERSON_OUTCOMES = [
    ToolApprovalDecision.Outcome.ALLOW_ONCE,
    ToolApprovalDecision.Outcome.ALLOW_CONVERSATION,
    ToolApprovalDecision.Outcome.DENY,
]


class ApprovalDecideInputSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=[(value, value) for value in PERSON_OUTCOMES])
    approval_id = serializers.IntegerField(required=False, help_text="Default: the call the turn waits on.")


class TurnApprovalDecideApi(APIView):
    """Decide the tool call a turn waits on (H1, U6): the bot's owner, or staff who may view turns and change tool
    approvals (turn_get hides the turns a user may not read: 404; one they may read but not decide: 403)."""

    @extend_schema(
        operation_id="turns_approvals_create",
        summary="Allow once, allow in this conversation, or deny the tool call the turn waits on.",
        request=ApprovalDecideInputSerializer,
        responses={
            200: TurnOutputSerializer,
            400: ERROR_RESPONSE,
            403: ERROR_RESPONSE,
            404: ERROR_RESPONSE,
            409: ERROR_RESPONSE,
        },
    )
    def post(self, request: Request, turn_id: int) -> Response:
        turn = turn_get(user=request.user, turn_id=turn_id)
        if not turn_decision_allowed(user=request.user, turn=turn):
            raise ForbiddenError(
                "You may read this turn, but deciding its tool calls takes the bot's owner or the permission to "
                "change tool approvals.",
                extra={"turn_id": turn.pk},
            )
        serializer = ApprovalDecideInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        wanted = serializer.validated_data.get("approval_id")
        approvals = turn.approvals.all() if wanted is None else turn.approvals.filter(pk=wanted)
        approval = approvals.filter(decision__isnull=True).order_by("-step", "-index").first()
        if approval is None:
            raise ConflictError("This turn waits on no undecided tool call.", extra={"turn_id": turn.pk})
        decided = approval_decide(
            approval=approval,
            outcome=serializer.validated_data["decision"],
            via=ToolApprovalDecision.Via.REST,
            decided_by=request.user.get_username(),
        )
        if decided.expired:  # U5: too late; the deadline's denial now stands (and the turn resumes with it)
            raise ConflictError(
                f"This approval expired at {approval.expires_at:%Y-%m-%d %H:%M:%S} UTC: no decision in time counts "
                "as a denial, and the call was not run.",
                extra={"turn_id": turn.pk, "approval_id": approval.pk, "outcome": decided.decision.outcome},
            )
        if not decided.won:
            raise ConflictError(
                "Someone decided this call first.", extra={"turn_id": turn.pk, "outcome": decided.decision.outcome}
            )
        turn.refresh_from_db()
        return Response(TurnOutputSerializer(turn).data)
