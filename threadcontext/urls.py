from django.urls import path

from threadcontext.apis import ContextDecisionDetailApi, ContextDecisionListApi

urlpatterns: list = [
    path("decisions/", ContextDecisionListApi.as_view(), name="decisions"),
    path("decisions/<int:decision_id>/", ContextDecisionDetailApi.as_view(), name="decision"),
]
