"""`python manage.py ensure_admin`: the superuser `admin` with a fresh random password, printed once."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from rest_framework.authtoken.models import Token

ADMIN_USERNAME = "admin"


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
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(f"Admin user: {ADMIN_USERNAME}")
        self.stdout.write(f"Admin password: {password}")
        self.stdout.write(f"API token: {token.key}  (Authorization: Token {token.key})")
