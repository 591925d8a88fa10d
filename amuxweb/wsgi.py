import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.production")

application = get_wsgi_application()

# Load the URLconf (with lark-oapi, seconds to import cold) as each worker starts, not on its first request:
# Feishu waits 3 s for a webhook's answer.
from django.urls import get_resolver  # noqa: E402

get_resolver().url_patterns  # noqa: B018
