"""The Celery app and the bench's tasks."""

import os
import time

from celery import Celery
from celery.signals import after_task_publish, task_postrun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchproj.settings")

app = Celery("benchproj")
app.config_from_object("django.conf:settings", namespace="CELERY")

REDIS_URL = f"redis://127.0.0.1:{os.environ.get('BENCH_REDIS_PORT', '6379')}/1"
STARTS_KEY = "bench:starts"
DONE_KEY = "bench:done"
QUEUED_KEY = "bench:queued_at"

_client = None


def _redis():
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(REDIS_URL)
    return _client


@app.task(name="bench.noop")
def noop():
    """The W1/W2/W6 handler: does nothing."""
    return None


@app.task(name="bench.mark")
def mark(scheduled):
    """The W3 handler: records 'scheduled start' (epoch seconds) at its start."""
    _redis().rpush(STARTS_KEY, f"{scheduled} {time.time()}")


@app.task(name="bench.mark_cron", bind=True)
def mark_cron(self):
    """The W4 handler: records 'periodic task name, start (epoch seconds)' at its start."""
    name = getattr(self.request, "periodic_task_name", None)
    _redis().rpush(STARTS_KEY, f"{name} {time.time()}")


# W4 needs the instant beat has published a first run of each of the N periodic tasks.
# Counting in beat's own process costs a set insert per publish; only the last one writes
# a Redis key. Enabled by the adapter through BENCH_COUNT_PUBLISH=N in beat's env only.
_publish_target = int(os.environ.get("BENCH_COUNT_PUBLISH", "0"))
_published = set()


@after_task_publish.connect
def _count_publish(sender=None, headers=None, **kwargs):
    if not _publish_target:
        return
    _published.add((headers or {}).get("periodic_task_name"))
    count = len(_published)
    if count == _publish_target:
        _redis().set(QUEUED_KEY, repr(time.time()))
    if count == _publish_target or count % 100 == 0:
        # Progress, so that a beat too slow to publish all N still reports how far it got.
        _redis().set(QUEUED_KEY + ":count", count)


# W2 without a result backend (Celery's default) has no store to count finished tasks in:
# the workers count them in Redis, one INCR per task after it ran (BENCH_COUNT_DONE=1 in
# the workers' environment only). That is one Redis round trip per task of measuring cost.
if os.environ.get("BENCH_COUNT_DONE"):
    @task_postrun.connect
    def _count_done(sender=None, state=None, **kwargs):
        if state == "SUCCESS":
            _redis().incr(DONE_KEY)
