"""API clients for tests."""

from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


def token_client(user) -> APIClient:
    """A client that authenticates as `user` with a DRF token, or an anonymous one for None."""
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client
