"""The hub's URLconf plus the bench's floor view (bench.webhook_floor), for the bench's own server only."""

from django.urls import path

from amuxweb.urls import urlpatterns as hub_urlpatterns
from bench.webhook_floor import floor

urlpatterns = [path("bench/floor/<slug:bot_slug>/", floor, name="bench-floor"), *hub_urlpatterns]
