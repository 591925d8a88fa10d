"""`python manage.py ensure_admin`: the superuser `admin` with a fresh random password, printed once.

Its API token is printed when it is created, on the first run only: a key is shown once, to its owner (the
operator who owns `admin`); a lost one is replaced on the console's "Your API token" page (issue 30, finding 1).
"""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

ADMIN_USERNAME = "admin"
TOKEN_PAGE = "authtoken/tokenproxy/mine/"


class Command(BaseCommand):
    help = "Create or update the superuser 'admin' with a fresh random password and print it (and an API token)."

    def handle(self, *args, **options) -> None:
        password = secrets.token_urlsafe(18)
        user, _ = get_user_model().objects.get_or_create(
            username=ADMIN_USERNAME, defaults={"email": "admin@example.com"}
        )
        user.is_staff = user.is_superuser = user.is_active = True
        user.set_password(password)
        user.save()
        token, is_created = Token.objects.get_or_create(user=user)
        self.stdout.write(f"Admin user: {ADMIN_USERNAME}")
        self.stdout.write(f"Admin password: {password}")
        if is_created:
            self.stdout.write(f"API token: {token.key}  (Authorization: Token {token.key})")
        else:
            self.stdout.write(f"API token: kept, not shown again (replace it at /admin/{TOKEN_PAGE})")
