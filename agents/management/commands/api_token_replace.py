"""`python manage.py api_token_replace <username>`: a new API token for a user who cannot reach the console.

A REST-only user (not staff) has no "Your API token" page; whoever runs the hub makes their key here and hands it
over. The key is printed this once and never shown again; the user's old key stops working at once.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.services.tokens import api_token_replace


class Command(BaseCommand):
    help = "Replace a user's API token and print the new key once (the old one stops working)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")

    def handle(self, *args, username: str, **options) -> None:
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user named {username[:64]!r}.")
        key = api_token_replace(user=user)
        self.stdout.write(f"API token of {username}: {key}  (Authorization: Token {key}; shown this once)")
