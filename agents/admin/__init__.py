# The agents admin is split by topic; importing the modules registers their ModelAdmins.
from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from agents.admin import core, turns  # noqa: F401

# The console's name, in the operator's language (the agents admin loads first of the hub's apps).
admin.site.site_header = _("amuxweb console")
admin.site.site_title = _("amuxweb console")
admin.site.index_title = _("Site administration")
