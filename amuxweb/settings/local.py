"""Local development settings: manage.py's default, so a fresh clone's `python manage.py <command>` just works.

The base settings with DEBUG on unless the environment says otherwise (DEBUG=false here behaves like
production, which the deploy checks use). Production is chosen explicitly: DJANGO_SETTINGS_MODULE=
amuxweb.settings.production (what wsgi.py and celery.py default to).
"""

from amuxweb.env import env

if "DEBUG" not in env.ENVIRON:
    env.ENVIRON["DEBUG"] = "true"

from amuxweb.settings.base import *  # noqa: E402,F403
