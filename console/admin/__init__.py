"""The console's admin: the dashboard's bot overview and the playground. Imported by the admin's autodiscovery."""

from console.admin import app_order, dashboard, playground, turns, workspaces  # noqa: F401  (each registers or orders)
