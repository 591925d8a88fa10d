# The agents admin is split by topic; importing the modules registers their ModelAdmins.
from agents.admin import core, mcp, turns  # noqa: F401
