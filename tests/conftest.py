"""Fixtures shared by every app's tests. App-specific fixtures live in tests/<app>/conftest.py."""

import pytest
from rest_framework.test import APIClient


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()
