"""``manage.py runall --web`` on an address another process listens on: one clear
refusal naming the address and the way out, before any process starts (gunicorn's own
"Address already in use" scrolled by among the daemons' lines, then everything stopped)."""

import socket

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from jobs.management.commands import runall


class WouldStart(Exception):
    pass


@pytest.fixture
def no_start(monkeypatch):
    def would_start(self):
        raise WouldStart

    monkeypatch.setattr(runall.Supervisor, "loop", would_start)


def test_a_taken_address_is_refused_before_any_process_starts(no_start):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        with override_settings(DEBUG=True), pytest.raises(CommandError) as refused:
            call_command("runall", "--web", "--bind", bind)

    assert bind in str(refused.value) and "BIND=HOST:PORT" in str(refused.value)


def test_a_free_address_goes_on_to_start(no_start):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        bind = f"127.0.0.1:{sock.getsockname()[1]}"
    with override_settings(DEBUG=True), pytest.raises(WouldStart):
        call_command("runall", "--web", "--bind", bind)


@pytest.mark.parametrize("bind", ["unix:/tmp/scheduler.sock", "localhost", "[::1]:x"])
def test_addresses_it_cannot_check_are_left_to_gunicorn(bind):
    assert runall.address_taken(bind) is False
