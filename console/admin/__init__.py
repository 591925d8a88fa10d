"""The console's admin: the dashboard's bot overview and the playground. Imported by the admin's autodiscovery."""

from console.admin import dashboard, playground  # noqa: F401  (each module registers its ModelAdmins)
