from django.urls import path

from amuxweb.feishu import views

urlpatterns = [
    path("webhook/<slug:bot_slug>/", views.webhook, name="webhook"),
    path("ping/", views.ping, name="ping"),
]
