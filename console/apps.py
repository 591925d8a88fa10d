from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ConsoleConfig(AppConfig):
    """The operator's console beyond the stock admin: the dashboard (the admin's front page) and the playground.

    Its label is the playground's, the app it grew from: the playground's migrations, permissions and admin URLs
    name it, and the dashboard has no models of its own. Listed after agents, probe and feishu so its admin
    module (the dashboard's bot overview) registers after theirs.
    """

    name = "console"
    label = "playground"
    verbose_name = _("Playground")
