"""The rate limits set at run time, per handler or per rate key, and the database
broker's buckets for them (docs/isolation.md, "Rate limits"). Defined apart from
runs/models.py and loaded by runs/apps.py; runs/flow/control.py reads and changes them."""

from django.db import models
from django.db.models import Q


class RateLimit(models.Model):
    """At most ``rate`` runs started per second (a token bucket of ``burst`` runs, refilled
    on the broker's clock) for every run of handler ``name`` (scope ``handler``), or for
    every run whose job's ``rate_key`` template is ``name``, one bucket per key value
    (scope ``key``). Set by users with ``runs.change_ratelimit``."""

    class Scope(models.TextChoices):
        HANDLER = "handler"
        KEY = "key"

    scope = models.CharField(max_length=16, choices=Scope.choices)
    name = models.CharField(max_length=200, help_text="a handler, or a rate_key template "
                                                      "such as payload.customer_id")
    rate = models.FloatField(help_text="runs started per second, > 0")
    burst = models.FloatField(help_text="the bucket's size in runs, >= 1")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="ratelimit_scope_name"),
            models.CheckConstraint(condition=Q(rate__gt=0) & Q(burst__gte=1),
                                   name="ratelimit_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.name}: {self.rate:g}/s, burst {self.burst:g}"


class RateLimitBucket(models.Model):
    """The database broker's bucket ``name`` (``h:<handler>`` or ``k:<template>=<value>``):
    ``tokens`` left as of ``updated_at`` (database clock). Redis keeps its own."""

    name = models.CharField(max_length=300, primary_key=True)
    tokens = models.FloatField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name}: {self.tokens:.1f} tokens"
