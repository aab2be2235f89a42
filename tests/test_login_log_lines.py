"""One console line per login outcome (scheduler_project/logging_config.py,
LoginOutcome): django-axes wrote four for one successful admin login."""

import io
import logging

import pytest

from scheduler_project.logging_config import LoginOutcome

pytestmark = pytest.mark.django_db


@pytest.fixture
def console():
    """The lines the axes logger's console handler writes during the test."""
    [handler] = [h for h in logging.getLogger("axes").handlers
                 if any(isinstance(f, LoginOutcome) for f in h.filters)]
    stream = io.StringIO()
    old = handler.setStream(stream)
    yield stream
    handler.setStream(old)


def test_a_login_and_a_failed_one_write_one_line_each(client, django_user_model, console):
    django_user_model.objects.create_superuser("root", password="pw-123456789")

    client.post("/admin/login/", {"username": "root", "password": "pw-123456789"})
    client.post("/admin/logout/")
    client.post("/admin/login/", {"username": "root", "password": "wrong"})

    lines = console.getvalue().splitlines()
    assert len(lines) == 2 or (len(lines) == 3 and "logout" in lines[1]), lines
    assert "Successful login" in lines[0]
    assert "login failure" in lines[-1]
