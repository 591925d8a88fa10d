"""API tokens: a key is made here and handed back once, to the caller, who shows it to its owner only."""

from django.contrib.auth.models import User
from django.db import transaction
from rest_framework.authtoken.models import Token


@transaction.atomic
def api_token_replace(*, user: User) -> str:
    """The user's new API token key; the old one, if any, stops working at once."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user).key
