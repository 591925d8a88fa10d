"""Who may see every owner's rows (ARCHITECTURE §12.0 U6): the one rule, for every app that serves them.

A user sees the rows of the bots they own. Seeing (or acting on) another owner's rows takes more than being staff:
a superuser, or a staff user holding the Django model permissions of that kind of row and action (view_turn to read
turns, change_toolapproval to decide approvals, ...). `is_staff` alone only opens the console's door; the admin
checks each model's permission behind it, and the REST API does the same through this function, so a staff user
given no permissions reads nothing of anyone else's anywhere.

agents (its selectors' `_visible_to`) and threadcontext (context decisions) both ask it; it lives here because
neither may import the other.
"""

from collections.abc import Iterable

from django.contrib.auth.models import AnonymousUser, User


def staff_may(user: User | AnonymousUser, permissions: Iterable[str]) -> bool:
    """Whether `user` may see every owner's rows for `permissions` ("app.codename" each): an active superuser, or an
    active staff user holding every one of them. Anyone else (the owners included) sees only their own rows."""
    if not user.is_authenticated or not user.is_active:
        return False
    if user.is_superuser:
        return True
    return user.is_staff and user.has_perms(list(permissions))
