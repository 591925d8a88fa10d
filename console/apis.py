"""GET /api/v1/usage/: what each of the caller's bots cost (A7), in tokens priced by the models' prices.

The caller's bots are the bots they own; every owner's only for a superuser or staff who may view bots and turns
(U6: usage is each bot's turns, priced)."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import VIEW_USAGE, bot_list
from console.dashboard.costs import KINDS, WINDOWS, BotCost, bot_costs

MONEY = inline_serializer(
    "Money",
    fields={
        "amounts": serializers.DictField(
            child=serializers.CharField(), help_text="Currency code -> amount (a decimal string)."
        ),
        "unpriced_tokens": serializers.IntegerField(help_text="Tokens of models without prices: counted, not costed."),
    },
)
KIND_MONEY = inline_serializer("KindMoney", fields={"primary": MONEY, "probe": MONEY, "summary": MONEY, "total": MONEY})
BOT_USAGE = inline_serializer(
    "BotUsage",
    many=True,  # "bots" is a list of these
    fields={
        "bot": serializers.CharField(help_text="The bot's slug."),
        "name": serializers.CharField(),
        "windows": inline_serializer(
            "UsageWindows", fields={name: KIND_MONEY for name, _ in WINDOWS}, help_text="Last 24 h, 7 and 30 days."
        ),
        "days": inline_serializer(
            "UsageDay",
            many=True,
            fields={"date": serializers.DateField(), "primary": MONEY, "probe": MONEY, "summary": MONEY},
            help_text="The last 30 days that had any usage, oldest first.",
        ),
    },
)


class UsageApi(APIView):
    @extend_schema(
        operation_id="usage_list",
        summary="Cost of each of your bots: the last 24 h, 7 and 30 days, per day, primary model vs discuss probe vs context summaries.",
        responses={200: inline_serializer("Usage", fields={"bots": BOT_USAGE})},
    )
    def get(self, request: Request) -> Response:
        bots = list(bot_list(user=request.user, permissions=VIEW_USAGE))
        costs = bot_costs(now=timezone.now(), bots=bots)
        rows = []
        for bot in bots:
            cost = costs.get(bot.pk) or BotCost()
            rows.append(
                {
                    "bot": bot.slug,
                    "name": bot.name,
                    "windows": {
                        name: {kind: money.as_json() for kind, money in kinds.items()}
                        for name, kinds in cost.windows.items()
                    },
                    "days": [
                        {"date": day.isoformat(), **{kind: cost.days[day][kind].as_json() for kind in KINDS}}
                        for day in sorted(cost.days)
                    ],
                }
            )
        return Response({"bots": rows})
