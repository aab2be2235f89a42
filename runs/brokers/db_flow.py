"""The database broker's flow control by handler and by key (docs/isolation.md, "Rate
limits" and "Concurrency keys"): one ``ClaimGates`` per claim, made under the claim's
advisory lock (runs/brokers/database.py), so the counts and buckets it reads stay true
until the claim commits.

Runs at a limit are left out of the claim's query (``exclusion``), so they hold up no run
behind them and no worker spins on them; ``admit`` then checks each candidate against
what this claim itself has taken. Buckets are rows of RateLimitBucket refilled on the
database clock.
"""

from collections import defaultdict

from django.db.models import Count, Q

from runs.clock import db_now
from runs.flow import control as flow
from runs.flow.models import RateLimit, RateLimitBucket
from runs.models import Run, RunState

COLUMNS = ("job__owner_id", "job__handler", "job__rate_key", "job__concurrency_key",
           "job__concurrency_limit")
"""The values each candidate row ends with, in ``admit``'s order."""


class ClaimGates:
    """The concurrency-key counts and rate buckets of one claim on ``using``."""

    def __init__(self, using: str):
        self.using = using
        self.limits = flow.rate_limits(using)
        self.now = db_now(using)
        # Keys count per owner (runs/flow/control.py, scoped): another tenant's runs under the
        # same key value hold none of these slots.
        self.used: dict[str, int] = {
            flow.scoped(owner, key): n for owner, key, n in
            Run.objects.using(using).filter(state=RunState.RUNNING)
            .exclude(job__concurrency_key="").values("job__owner_id", "job__concurrency_key")
            .annotate(n=Count("pk")).values_list("job__owner_id", "job__concurrency_key", "n")}
        self.tokens: dict[str, float] = {}
        self.touched: set[str] = set()
        self._load_buckets()

    def _load_buckets(self) -> None:
        handlers = [f"h:{name}" for scope, name in self.limits
                    if scope == RateLimit.Scope.HANDLER]
        templates = [name for scope, name in self.limits if scope == RateLimit.Scope.KEY]
        rows = RateLimitBucket.objects.using(self.using)
        wanted = Q(name__in=handlers)
        for template in templates:  # k:<owner>:<template>=<value>
            wanted |= Q(name__startswith="k:", name__contains=f":{template}=")
        if not handlers and not templates:
            return
        for name, tokens, updated_at in rows.filter(wanted).values_list(
                "name", "tokens", "updated_at"):
            spec = self._spec(name)
            if spec is not None:
                since = max((self.now - updated_at).total_seconds(), 0.0)
                self.tokens[name] = min(spec[1], tokens + since * spec[0])

    def _spec(self, bucket: str) -> tuple[float, float] | None:
        if bucket.startswith("h:"):
            return self.limits.get((RateLimit.Scope.HANDLER, bucket[2:]))
        return self.limits.get((RateLimit.Scope.KEY, flow.template_of(bucket[2:])))

    def _left(self, bucket: str, burst: float) -> float:
        return self.tokens.get(bucket, burst)

    def exclusion(self) -> Q:
        """The runs no slot or token is left for now: keys at their limit, handlers and
        key values whose bucket is empty."""
        excluded = Q(pk__in=[])
        by_count: dict[int, list[str]] = defaultdict(list)
        for key, n in self.used.items():
            by_count[n].append(key)
        for n, keys in by_count.items():
            for key in keys:
                excluded |= owned(key, "job__concurrency_key") & Q(
                    job__concurrency_limit__lte=n)
        empty = [name for name, tokens in self.tokens.items() if tokens < 1]
        handlers = [name[2:] for name in empty if name.startswith("h:")]
        if handlers:
            excluded |= Q(job__handler__in=handlers)
        for name in empty:
            if name.startswith("k:"):
                excluded |= owned(name[2:], "job__rate_key")
        return excluded

    def admit(self, row: tuple) -> bool:
        """Whether the candidate ``row`` (ending with COLUMNS) may be claimed now; if so
        its concurrency slot and tokens are taken."""
        owner, handler, rate_key, ckey, limit = row[-5:]
        rate_key, ckey = flow.scoped(owner, rate_key), flow.scoped(owner, ckey)
        if ckey and self.used.get(ckey, 0) >= limit:
            return False
        buckets = flow.buckets_of(handler, rate_key, self.limits)
        if any(self._left(name, burst) < 1 for name, _rate, burst in buckets):
            return False
        if ckey:
            self.used[ckey] = self.used.get(ckey, 0) + 1
        for name, _rate, burst in buckets:
            self.tokens[name] = self._left(name, burst) - 1
            self.touched.add(name)
        return True

    def save(self) -> None:
        """Store the buckets this claim drew from, as of the claim's database time."""
        rows = RateLimitBucket.objects.using(self.using)
        for name in sorted(self.touched):
            rows.update_or_create(name=name, defaults={"tokens": self.tokens[name],
                                                       "updated_at": self.now})


def owned(scoped_key: str, field: str) -> Q:
    """The runs whose job has ``field`` (job__rate_key, job__concurrency_key) equal to
    ``scoped_key``'s key and the owner it is scoped to (runs/flow/control.py, scoped)."""
    owner, _, key = scoped_key.partition(":")
    who = Q(job__owner_id__isnull=True) if owner == "0" else Q(job__owner_id=int(owner))
    return who & Q(**{field: key})
