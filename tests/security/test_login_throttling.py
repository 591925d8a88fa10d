"""Issue 10 item 4: django-axes locks the admin login after AXES_FAILURE_LIMIT wrong passwords, by user name and by
address; the right password is refused while locked; `manage.py axes_reset_username` unlocks.

The REST API has no password endpoint (tokens are issued in the admin, agents/urls.py), so the admin login is the
only place a password is tried.
"""

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.core.management import call_command
from django.test import Client

from tests.agents.factories import UserFactory

pytestmark = pytest.mark.django_db

LOGIN_URL = "/admin/login/?next=/admin/"
PASSWORD = "correct horse battery staple"


def login(client: Client, username: str, password: str, *, address: str = "203.0.113.7"):
    return client.post(LOGIN_URL, {"username": username, "password": password}, REMOTE_ADDR=address)


def is_logged_in(response) -> bool:
    return response.status_code == 302 and response["Location"] == "/admin/"


@pytest.fixture
def staff():
    user = UserFactory(username="root", is_staff=True, is_superuser=True)
    user.set_password(PASSWORD)
    user.save()
    return user


def test_i10_4_wrong_passwords_lock_the_user_out_with_a_clear_message(staff):
    # given
    client = Client()
    # when
    answers = [login(client, "root", f"wrong-{n}").status_code for n in range(settings.AXES_FAILURE_LIMIT)]
    locked = login(client, "root", "wrong-again")
    # then: every attempt before the limit is the normal login page; the limit's attempt and after are a 429
    assert answers == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]
    assert locked.status_code == 429
    assert settings.AXES_COOLOFF_MESSAGE in locked.content.decode()
    assert "axes_reset_username" in settings.AXES_COOLOFF_MESSAGE


def test_i10_4_the_right_password_is_refused_while_locked_and_works_after_axes_reset(staff):
    # given: locked out
    client = Client()
    for n in range(settings.AXES_FAILURE_LIMIT):
        login(client, "root", f"wrong-{n}")
    # when
    while_locked = login(client, "root", PASSWORD)
    session_while_locked = dict(client.session)
    call_command("axes_reset_username", "root")
    after_reset = login(client, "root", PASSWORD)
    # then
    assert while_locked.status_code == 429
    assert "_auth_user_id" not in session_while_locked
    assert is_logged_in(after_reset)
    assert AccessAttempt.objects.count() == 0  # a success resets the count (AXES_RESET_ON_SUCCESS)


def test_i10_4_the_lockout_holds_per_user_from_another_address_and_per_address_for_another_user(staff):
    # given: one address fails the limit against "root"
    for n in range(settings.AXES_FAILURE_LIMIT):
        login(Client(), "root", f"wrong-{n}", address="203.0.113.7")
    UserFactory(username="alice", is_staff=True).set_password(PASSWORD)
    # when
    same_user_elsewhere = login(Client(), "root", PASSWORD, address="198.51.100.1")
    same_address_other_user = login(Client(), "alice", PASSWORD, address="203.0.113.7")
    other_user_elsewhere = login(Client(), "nobody", "wrong", address="198.51.100.2")
    # then
    assert same_user_elsewhere.status_code == 429
    assert same_address_other_user.status_code == 429
    assert other_user_elsewhere.status_code == 200  # the normal login page with its error


def test_i10_4_unlock_by_address_with_axes_reset_ip(staff):
    # given
    for n in range(settings.AXES_FAILURE_LIMIT):
        login(Client(), "someone", f"wrong-{n}", address="203.0.113.9")
    assert login(Client(), "root", PASSWORD, address="203.0.113.9").status_code == 429
    # when
    call_command("axes_reset_ip", "203.0.113.9")
    # then
    assert is_logged_in(login(Client(), "root", PASSWORD, address="203.0.113.9"))
