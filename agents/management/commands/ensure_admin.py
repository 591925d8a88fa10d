"""`python manage.py ensure_admin`: the superuser `admin`, with a random password printed when it is created.

A later run (every `make run`) keeps the password, so a restart logs no one out (issue 27); `--reset-password`
sets and prints a fresh one.

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
    help = "Create the superuser 'admin' with a random password and print it (and an API token) the first time."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--reset-password", action="store_true", help="Set and print a fresh random password.")

    def handle(self, *args, **options) -> None:
        user, created = get_user_model().objects.get_or_create(
            username=ADMIN_USERNAME, defaults={"email": "admin@example.com"}
        )
        user.is_staff = user.is_superuser = user.is_active = True
        password = ""
        if created or options["reset_password"] or not user.has_usable_password():
            password = secrets.token_urlsafe(18)
            user.set_password(password)
        user.save()
        token, is_created = Token.objects.get_or_create(user=user)
        self.stdout.write(f"Admin user: {ADMIN_USERNAME}")
        if password:
            self.stdout.write(f"Admin password: {password}")
        else:
            self.stdout.write(
                "Admin password: unchanged (python manage.py ensure_admin --reset-password prints a new one)"
            )
        if is_created:
            self.stdout.write(f"API token: {token.key}  (Authorization: Token {token.key})")
        else:
            self.stdout.write(f"API token: kept, not shown again (replace it at /admin/{TOKEN_PAGE})")
