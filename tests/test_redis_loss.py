"""Redis is only the working set: losing all of it mid-load loses no run."""

import pytest
import redis
from django.conf import settings

from jobs import services
from runs.brokers.redis.wire import redis_client
from runs.models import Run
from tests.conftest import daemon_env, start_daemon, stop, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_flushall_mid_load_loses_no_run(tmp_path, redis_kind):
    env = daemon_env("redis", lease_ttl_s=5, reconcile_interval_s=30)
    specs = [{"handler": "sleep", "payload": {"seconds": 0.05}, "delay_s": i % 6}
             for i in range(600)]
    procs = [start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")] + [
        start_daemon(["runworker", "--concurrency", "3"], env, tmp_path / f"w{i}.log")
        for i in range(2)
    ]
    try:
        for spec in specs:
            services.create_job(spec["handler"], spec["payload"], delay_s=spec["delay_s"])
        wait_until(lambda: Run.objects.filter(state="succeeded").count() >= 100,
                   message="the load to get going")

        # FLUSHDB of the test's own Redis db: to the broker it is a FLUSHALL, and it
        # leaves any other user of this Redis alone (chaos/ flushes a private server).
        # The test cluster is private: FLUSHALL on every master.
        if redis_kind == "redis_cluster":
            redis_client(settings.REDIS_URL).flushall()
        else:
            redis.Redis.from_url(settings.REDIS_URL).flushdb()
        flushed_with_pending = Run.objects.exclude(state="succeeded").count()

        wait_until(lambda: Run.objects.filter(state="succeeded").count() == 600, timeout=90,
                   interval=0.5, message="every run to succeed after the flush")
        assert flushed_with_pending > 0, "the flush came too late to test anything"
        assert Run.objects.filter(state="dead").count() == 0
    finally:
        stop(*procs)
