"""Secrets encrypted at rest with Fernet (the `cryptography` library).

Keys come from FIELD_ENCRYPTION_KEY (comma separated, newest first, so keys can be rotated); when it is
unset a key is derived from SECRET_KEY, which is fine for the embedded default and documented as such.
"""

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models


@lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    if not keys:
        derived = base64.urlsafe_b64encode(hashlib.sha256(f"amuxweb-fields:{secret_key}".encode()).digest())
        return MultiFernet([Fernet(derived)])
    try:
        return MultiFernet([Fernet(key.encode()) for key in keys])
    except ValueError as error:
        raise ImproperlyConfigured("FIELD_ENCRYPTION_KEY must hold url-safe base64 Fernet keys.") from error


def field_fernet() -> MultiFernet:
    return _fernet(tuple(settings.FIELD_ENCRYPTION_KEY), settings.SECRET_KEY)


class EncryptedTextField(models.TextField):
    """A text column whose value is stored as a Fernet token; the empty string stays empty."""

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value in (None, ""):
            return value
        return field_fernet().encrypt(value.encode()).decode()

    def from_db_value(self, value, expression, connection):
        if value in (None, ""):
            return value
        try:
            return field_fernet().decrypt(value.encode()).decode()
        except InvalidToken as error:
            raise ImproperlyConfigured("A stored secret cannot be decrypted: check FIELD_ENCRYPTION_KEY.") from error
