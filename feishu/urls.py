from django.urls import path

from feishu.inbound import views

urlpatterns = [
    path("webhook/<slug:bot_slug>/", views.webhook, name="webhook"),
    path("ping/", views.ping, name="ping"),
]
