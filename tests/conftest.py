"""Fixtures shared by every app's tests. App-specific fixtures live in tests/<app>/conftest.py."""

import pytest
from rest_framework.test import APIClient


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


# --- LLM stub server and real Celery worker (engineer "c", issue 4) -------------------------------------
from tests.stubs.llm_servers import llm_stub  # noqa: E402,F401  (the fixture, for every test)
# --- end of engineer "c" section ---------------------------------------------------------------------------
