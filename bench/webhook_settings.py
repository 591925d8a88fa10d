"""The webhook bench's server settings: the hub's own, plus the floor view's URL (bench.webhook_urls)."""

from amuxweb.settings.base import *  # noqa: F403

ROOT_URLCONF = "bench.webhook_urls"
