"""scheduler_core.conf: settings.SCHEDULER is read once and again after each settings
change, so every change a test or a deployment makes through Django is seen."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from scheduler_core import conf


def test_a_changed_scheduler_setting_is_read_at_once(settings):
    settings.SCHEDULER = {"SHARDS": 3}
    assert conf.get("SHARDS") == 3
    settings.SCHEDULER = {"SHARDS": 5}
    assert conf.get("SHARDS") == 5
    with override_settings(SCHEDULER={"SHARDS": 7}):
        assert conf.get("SHARDS") == 7
    assert conf.get("SHARDS") == 5
    del settings.SCHEDULER
    assert conf.get("SHARDS") == conf.DEFAULTS["SHARDS"].default


def test_the_environment_is_read_on_every_get(settings, monkeypatch):
    settings.SCHEDULER = {}
    monkeypatch.setenv("SCHEDULER_SHARDS", "11")
    assert conf.get("SHARDS") == 11
    monkeypatch.setenv("SCHEDULER_SHARDS", "12")
    assert conf.get("SHARDS") == 12


def test_an_unknown_key_is_refused_after_a_change(settings):
    assert conf.get("SHARDS")  # read and kept
    settings.SCHEDULER = {"SHARDZ": 2}
    with pytest.raises(ImproperlyConfigured, match="Unknown SCHEDULER settings: SHARDZ"):
        conf.get("SHARDS")
