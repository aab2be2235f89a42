"""The systems, rows and sizes of the side-by-side benchmark (BENCHMARKS.md, "Rules"), read
by bench/run.py, bench/report.py and bench/plots.py.

A system is ours or one peer (an adapter bench/peers/<name>/bench.py in a virtualenv of its
own); a row is a system at one variant: ``default`` (its documented defaults) or ``tuned``
(its best documented tuning; each adapter's docstring says which options and which doc
page). Ours has one row, at our defaults (``runworker --concurrency 2``: the worker's own
default is 4 child processes; 2 is the rule's process count).
"""

WORKLOADS = ["W1", "W2", "W3", "W4", "W5", "W6", "ceiling"]
# The order bench/run.py measures them in: the targets' workloads (W1, W2, the ceiling)
# and the short ones first, then W4 (a minute boundary per run: about 46 minutes whatever
# the load) and W3 last, so that a run stopped at its session's end has lost the least
# (W3's rows were measured under these rules on 2026-12-01 and are carried over with
# their date; W4's never were).
RUN_ORDER = ["W1", "W2", "ceiling", "W6", "W5", "W4", "W3"]
VARIANTS = ["default", "tuned"]
HIGHER_IS_BETTER = {"W1": True, "W2": True, "W3": False, "W4": False, "W5": False,
                    "W6": False, "ceiling": True}
TITLES = {
    "W1": "W1 ingest (jobs stored per second)",
    "W2": "W2 drain of N ready no-op jobs by 2 worker processes (jobs/s, from the workers' "
          "launch)",
    "W3": "W3 lag p99 at 116 jobs/s, each due 2 s after submission",
    "W4": "W4 N cron jobs due at one minute: last started, seconds after the boundary",
    "W5": "W5 scheduler tick with 1 M cron jobs (1 K due)",
    "W6": "W6 Redis bytes per pending run",
    "ceiling": "Ceiling: W2's writes by a bare loop, against W2 in the same pairs",
}

# name -> label, the virtualenv it runs in (None: this project's), the workloads its
# adapter measures (others are not run for it), its W2 size (both rows; ours runs the same
# N in its pair), and whether W1's two rows come from one run (single calls: default; the
# documented bulk call: tuned).
SYSTEMS = {
    "ours": {"label": "ours", "venv": None, "workloads": WORKLOADS},
    "celery": {"label": "Celery", "workloads": ["W1", "W2", "W3", "W4", "W6"],
               "w2_n": {"default": 1000, "tuned": 2000}, "w1_n": 5000},
    "rq": {"label": "RQ", "workloads": ["W1", "W2", "W3", "W4", "W6"],
           "w2_n": {"default": 300, "tuned": 1000}, "w1_n": 5000},
    "dramatiq": {"label": "Dramatiq", "workloads": ["W1", "W2", "W3", "W6"], "w2_n": 20000,
                 "w1_n": 5000},
    "procrastinate": {"label": "procrastinate", "workloads": ["W1", "W2", "W3", "W4"],
                      "w2_n": 2000, "w1_n": 5000},
    "djangoq": {"label": "django-q2", "workloads": ["W1", "W2", "W3", "W4", "W5", "W6"],
                "w2_n": 500, "w1_n": 5000},
    "djtasksdb": {"label": "django-tasks-db", "workloads": ["W1", "W2"], "w2_n": 300,
                  "w1_n": 1000},
    "vtasks": {"label": "django-vtasks (database)", "workloads": ["W1", "W2"], "w2_n": 1000,
               "w1_n": 5000},
    "vtasksvk": {"label": "django-vtasks (Valkey)", "venv": "vtasks",
                 "workloads": ["W1", "W2"], "w2_n": 20000, "w1_n": 5000},
    "pgqueuer": {"label": "pgqueuer", "workloads": ["W1", "W2", "W3"], "w2_n": 20000,
                 "w1_n": 5000},
    "dtscheduler": {"label": "django-tasks-scheduler", "workloads": ["W4"]},
}
PEERS = [name for name in SYSTEMS if name != "ours"]
LABELS = {name: spec["label"] for name, spec in SYSTEMS.items()}

# Workloads whose peer rows differ by worker options; W1 (no worker: the two rows are the
# single and the bulk enqueue of one run) and W6 (pending jobs, no worker) have one run.
WORKER_WORKLOADS = {"W2", "W3", "W4"}

# Full sizes (--quick: QUICK_ARGS). W2's N is per row (SYSTEMS' w2_n, an int or per
# variant): the slowest rows drain a few dozen jobs a second on this machine, and three
# interleaved pairs of every row at 20,000 jobs would take many hours; each pair runs ours
# at the same N, so a pair's ratio is like for like, and our own row is its runs at the
# largest N. W1's peer runs store w1_n jobs (a sample of their one-call-per-job rate and
# of their bulk call's); ours stores 20,000 in batches of 10,000, its documented batch.
W2_N_OURS = 20000
# W3 and W4 at full size take the same options for every row, ours too (so that bench/run.py
# can chain their pairs, pairs.chain_plan). W3: 20 s at 116 jobs/s (2,320 jobs; 60 s took
# 64-190 s a run, and a row that keeps up gives the same p99 at 20 s; a row that falls
# behind shows a lag that grows with the duration either way). W4: 1,000 cron jobs for
# every row: each run waits for a minute boundary (about a minute a run whatever N), and
# at 20,000 the slow peers ran into their 5-minute limits (Celery 1,479 started, RQ
# 14,023, django-q2 15,000); ours without its second, 50,000-job boundary (--n-large 0).
FULL_ARGS = {"W3": ["--duration", "20"], "W4": ["--n", "1000"]}
OURS_FULL_ARGS = {"W4": ["--n-large", "0"]}
CHAINED = {"W3", "W4"}
QUICK_ARGS = {"W1": ["--n", "2000"], "W2": ["--n", "1000"], "W3": ["--duration", "5"],
              "W4": ["--n", "1000"], "W6": ["--n", "5000"], "ceiling": ["--n", "2000"]}
FULL_SIZES = ("W1 20,000 jobs; W2 N per row (the table's N column; ours 20,000 alone); W3 "
              "20 s (2,320 jobs); W4 1,000 cron jobs; W5 up to 1 M cron jobs; W6 50,000 "
              "pending")
QUICK_SIZES = "W1 2,000 jobs, W2 1,000 jobs, W3 5 s, W4 1,000 cron jobs, W5 up to 100 K, " \
              "W6 5,000 pending"


def venv_of(system: str) -> str | None:
    """The virtualenv folder name under bench/.venvs a system runs in (None: ours)."""
    spec = SYSTEMS[system]
    return spec.get("venv", system) if system != "ours" else None


def variants_of(system: str, workload: str) -> list[str]:
    """The rows a system has for a workload."""
    if system == "ours" or workload not in WORKER_WORKLOADS:
        return ["default"]
    return list(VARIANTS)


def size_args(system: str, workload: str, quick: bool, n: int | None,
              variant: str = "default") -> list[str]:
    """The size options of one run: --n N when given, else --quick's sizes, else W1's and
    W2's per-row N (full sizes otherwise are each adapter's own defaults)."""
    if n:
        return ["--n", str(n)]
    if quick:
        return ["--quick", *QUICK_ARGS.get(workload, [])]
    if workload in FULL_ARGS:
        extra = OURS_FULL_ARGS.get(workload, []) if system == "ours" else []
        return [*FULL_ARGS[workload], *extra]
    if system == "ours":
        # The ceiling's pair runs our W2 at the bare loop's N: 20,000, its full size.
        return ["--n", str(W2_N_OURS)] if workload == "ceiling" else []
    key = {"W1": "w1_n", "W2": "w2_n"}.get(workload)
    size = SYSTEMS[system].get(key) if key else None
    if isinstance(size, dict):
        size = size[variant]
    return ["--n", str(size)] if size else []
