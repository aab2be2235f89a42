"""The capacity model (docs/capacity.md): CPU seconds per run for each step of a run's life
in each tier, from bench/capacity.py's measurements; what a whole run should cost by it;
and the cores of each tier the design brief's rates need.

Pure arithmetic on the measurements' dicts, so the doc's figures can be recomputed from
bench/results/capacity.json alone.
"""

import math

STEPS = ("ingest", "materialise", "promote", "lease", "execute", "ack")
TIERS = ("python", "postgresql", "redis")
# Which Python process a step's Python CPU is spent in (bench/capacity.py's meters).
PROCESS = {"ingest": "web", "materialise": "scheduler", "promote": "dispatcher",
           "lease": "worker", "execute": "worker children", "ack": "worker"}
# The design brief's figures (docs/architecture.md, "What it is for").
RUNS_PER_DAY = 10_000_000
INGEST_PER_S = 10_000
TOP_OF_MINUTE_RUNS = 20_000
LOOKAHEAD_S = 10.0  # the scheduler materialises a minute's runs this far ahead
BUSY_TARGET = 0.7  # size a tier to run at most this busy


def build(steps: dict, n: int) -> dict:
    """{step: {tier: CPU seconds per run}} from the measured phases of ``n`` runs each
    (bench/capacity.py's step_* results and lease_ack_split's shares)."""
    split, drain = steps["split"], steps["drain"]
    per = {}
    for step in ("ingest", "materialise", "promote"):
        per[step] = {tier: steps[step][tier] / n for tier in TIERS}
    for step, share in (("lease", lambda t: split[t]), ("ack", lambda t: 1 - split[t])):
        per[step] = {"python": drain["python_parent"] * share("python") / n,
                     "postgresql": drain["postgresql"] * share("postgresql") / n,
                     "redis": drain["redis"] * share("redis") / n}
    per["execute"] = {"python": drain["python_children"] / n, "postgresql": 0.0,
                      "redis": 0.0}
    return per


def path_cost(per: dict, steps: tuple[str, ...]) -> dict:
    """CPU seconds per run, by tier and in all, over ``steps``."""
    out = {tier: sum(per[s][tier] for s in steps) for tier in TIERS}
    out["total"] = sum(out.values())
    return out


def predict(per: dict, one_off: int, cron: int, wall_s: float, idle: dict) -> dict:
    """CPU seconds per meter (Python process kind, PostgreSQL, Redis) the model expects
    for ``one_off`` REST-ingested runs and ``cron`` materialised runs, all leased, executed
    and acked, plus each meter's idle rate (CPU s/s) times ``wall_s``. The runs are due
    when stored, so none is promoted (docs/capacity.md, "The check")."""
    n = one_off + cron
    counts = {"ingest": one_off, "materialise": cron, "promote": 0, "lease": n,
              "execute": n, "ack": n}
    out = {name: rate * wall_s for name, rate in idle.items()}
    for step, count in counts.items():
        for tier in TIERS:
            name = PROCESS[step] if tier == "python" else tier
            out[name] = out.get(name, 0.0) + per[step][tier] * count
    return out


def by_tier(per_meter: dict) -> dict:
    """Meters summed into the three tiers (every Python process kind is "python")."""
    out = {tier: 0.0 for tier in TIERS}
    for name, cpu in per_meter.items():
        out[name if name in ("postgresql", "redis") else "python"] += cpu
    out["total"] = sum(out[t] for t in TIERS)
    return out


def sizes(per: dict) -> dict:
    """Cores (of the measuring machine's kind) each tier needs for the brief's three
    figures: raw (100% busy) and at BUSY_TARGET."""
    one_off = ("ingest", "promote", "lease", "execute", "ack")
    out = {}

    def cores(load: dict[str, float]) -> dict:
        """``load``: step -> runs per second of it."""
        tiers: dict[str, float] = {}
        for step, rate in load.items():
            for tier in TIERS:
                name = PROCESS[step] if tier == "python" else tier
                tiers[name] = tiers.get(name, 0.0) + per[step][tier] * rate
        return {name: {"cores": round(c, 3), "cores_at_target": round(c / BUSY_TARGET, 2)}
                for name, c in sorted(tiers.items())}

    out["10M_runs_per_day"] = cores({s: RUNS_PER_DAY / 86_400 for s in one_off})
    out["10k_jobs_per_s_ingest"] = cores({"ingest": INGEST_PER_S})
    due = ("promote", "lease", "execute", "ack")
    out["20k_runs_at_top_of_minute"] = cores(
        {"materialise": TOP_OF_MINUTE_RUNS / LOOKAHEAD_S,
         **{s: TOP_OF_MINUTE_RUNS for s in due}})
    return out


def queue_slots(runs_per_s: float, redis_us_per_run: float, busy: float = BUSY_TARGET) -> int:
    """Redis cores, so slots on masters of their own, that one queue's ``runs_per_s`` need
    at ``redis_us_per_run`` µs of Redis CPU a run (push, lease and ack: bench/redis_cpu.py),
    each core at most ``busy`` busy: ceil(runs/s × µs / 10^6 / busy), at least 1. Above 1
    the queue needs SPREAD_QUEUES and at least that many SHARDS, its runs spread over
    them (docs/scaling.md, "One queue over several masters")."""
    return max(1, math.ceil(runs_per_s * redis_us_per_run / 1e6 / busy))
