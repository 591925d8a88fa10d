"""Production settings, by their explicit name: the base settings (DEBUG off unless set, SECRET_KEY required)."""

from amuxweb.settings.base import *  # noqa: F403
