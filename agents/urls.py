from django.urls import path

from agents.apis.threads import ThreadContextApi, ThreadDetailApi, ThreadHistoryApi, ThreadListCreateApi
from agents.apis.turns import ThreadMessagePostApi, TurnApprovalDecideApi, TurnDetailApi

urlpatterns: list = [
    path("threads/", ThreadListCreateApi.as_view(), name="threads"),
    path("threads/<int:thread_id>/", ThreadDetailApi.as_view(), name="thread"),
    path("threads/<int:thread_id>/history/", ThreadHistoryApi.as_view(), name="history"),
    path("threads/<int:thread_id>/context/", ThreadContextApi.as_view(), name="context"),
    path("threads/<int:thread_id>/messages/", ThreadMessagePostApi.as_view(), name="thread-messages"),
    path("turns/<int:turn_id>/", TurnDetailApi.as_view(), name="turn-detail"),
    path("turns/<int:turn_id>/approvals/", TurnApprovalDecideApi.as_view(), name="turn-approvals"),
]
