"""scheduler_core.conf: settings.SCHEDULER is read on every get, from the settings object
itself, and only its check of unknown keys is kept, so every change is seen."""

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


def test_an_assignment_without_a_signal_is_seen():
    from django.conf import settings

    saved = getattr(settings._wrapped, "SCHEDULER", None)
    try:
        settings.SCHEDULER = {"SHARDS": 3}  # LazySettings' own assignment: no signal
        assert conf.get("SHARDS") == 3
        settings.SCHEDULER["SHARDZ"] = 1  # in place: a key more is checked again
        with pytest.raises(ImproperlyConfigured, match="SHARDZ"):
            conf.get("SHARDS")
        settings.SCHEDULER = {"SHARDS": 3}
        assert conf.get("SHARDS") == 3
        del settings.SCHEDULER["SHARDS"]  # another key, the same number of them
        settings.SCHEDULER["SHARDZ"] = 3
        with pytest.raises(ImproperlyConfigured, match="SHARDZ"):
            conf.get("SHARDS")
    finally:
        if saved is None:
            del settings.SCHEDULER
        else:
            settings.SCHEDULER = saved
