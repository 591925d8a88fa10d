import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.production")

application = get_wsgi_application()

# Load the URLconf and lark-oapi (seconds to import cold, lazy everywhere else: feishu) as the app is
# loaded, not on its first request: Feishu waits 3 s for a webhook's answer. Under gunicorn `--preload` this runs
# once in the master and every worker shares the pages by fork.
from django.urls import get_resolver  # noqa: E402

from feishu import lark_modules_load  # noqa: E402

get_resolver().url_patterns  # noqa: B018
lark_modules_load()
