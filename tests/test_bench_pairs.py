"""bench/pairs.py's chained pairs and bench/rows.py's sizes (BENCHMARKS.md, "Rules" and
"Reproduce"): W3 and W4 share one run of ours between the rows on either side of it, so
every pair must still be two adjacent runs, each row must alternate which of its pair goes
first, and our row must count each of its runs once; W3's N column showed 0.00 for ours."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import pairs  # noqa: E402
import rows  # noqa: E402
import run  # noqa: E402


def fake_runs(monkeypatch, fail: set | None = None):
    """pairs.one_run replaced by a recorder: no adapter runs (this is the harness's
    bookkeeping, not a measurement). Returns the list of runs in the order made."""
    made = []

    def one_run(system, workload, python, variant, size, quick, log_dir):
        result = {"figure": float(len(made) + 1), "unit": "ms", "size": size,
                  "run_id": f"{system}-{len(made)}", "load_1m": [1.0, 1.0],
                  "details": {"rate": 116.0, "duration_s": 20.0, "count": 2300}}
        if (system, variant) in (fail or set()):
            result = {"failed": "boom", "run_id": f"{system}-{len(made)}"}
        made.append((system, variant, result))
        return result

    monkeypatch.setattr(pairs, "one_run", one_run)
    return made


def test_a_chain_pairs_adjacent_runs_and_alternates_who_goes_first(monkeypatch):
    made = fake_runs(monkeypatch)
    keys = [("celery", "default"), ("celery", "tuned"), ("rq", "default"),
            ("rq", "tuned"), ("pgqueuer", "default")]
    cells = pairs.run_chain(keys, "W3", {"ours": "py", "celery": "py", "rq": "py",
                                         "pgqueuer": "py"}, 3, False, None, Path("/tmp"))
    position = {r["run_id"]: i for i, (_, _, r) in enumerate(made)}
    ours_runs = [r for s, _, r in made if s == "ours"]
    peer_runs = [r for s, _, r in made if s != "ours"]
    assert len(peer_runs) == 15
    assert len(ours_runs) < 15  # the point: fewer runs of ours than pairs
    for key in keys:
        cell = cells[key]["pairs"]
        assert len(cell) == 3
        firsts = []
        for pair in cell:
            gap = position[pair["peer"]["run_id"]] - position[pair["ours"]["run_id"]]
            assert abs(gap) == 1, (key, pair["order"])  # adjacent runs
            assert pair["order"] == (["ours", "row"] if gap == 1 else ["row", "ours"])
            firsts.append(pair["order"][0])
        assert firsts in (["ours", "row", "ours"], ["row", "ours", "row"]), (key, firsts)
    # A couple's cells are whole before the next couple's begin (a stopped run keeps
    # whole cells): celery's runs all come before rq's.
    last_celery = max(i for i, (s, _, _) in enumerate(made) if s == "celery")
    first_rq = min(i for i, (s, _, _) in enumerate(made) if s == "rq")
    assert last_celery < first_rq
    # Never two runs of ours one after the other.
    kinds = [s for s, _, _ in made]
    assert all(not (a == b == "ours") for a, b in zip(kinds, kinds[1:], strict=False))
    # W3 runs at one size for every row, ours too.
    assert {tuple(r["size"]) for _, _, r in made} == {("--duration", "20")}


def test_a_row_failing_in_its_first_pair_leaves_the_chain(monkeypatch):
    made = fake_runs(monkeypatch, fail={("rq", "default")})
    keys = [("celery", "default"), ("rq", "default"), ("celery", "tuned")]
    cells = pairs.run_chain(keys, "W4", {"ours": "py", "celery": "py", "rq": "py"}, 3,
                            False, None, Path("/tmp"))
    assert len(cells[("rq", "default")]["pairs"]) == 1
    assert sum(1 for s, v, _ in made if (s, v) == ("rq", "default")) == 1
    assert len(cells[("celery", "tuned")]["pairs"]) == 3
    # W4 at one N for every row; ours without its second, larger boundary.
    sizes = {(s, tuple(r.get("size") or ())) for s, _, r in made if "size" in r}
    assert sizes == {("ours", ("--n", "1000", "--n-large", "0")),
                     ("celery", ("--n", "1000"))}


def test_our_row_counts_a_shared_run_once_and_gives_w3_an_n(monkeypatch):
    fake_runs(monkeypatch)
    keys = [("celery", "default"), ("celery", "tuned")]
    cells = pairs.run_chain(keys, "W3", {"ours": "py", "celery": "py"}, 3, False, None,
                            Path("/tmp"))
    distinct = {p["ours"]["run_id"] for c in cells.values() for p in c["pairs"]}
    mine = run.ours_row("W3", cells)
    assert mine["pairs"] == len(distinct) < 6
    assert mine["n"] == 2320  # was 0, shown as "0.00" in the table's N column
    row = pairs.aggregate("celery", "W3", cells[("celery", "default")], "default")
    assert row["n"] == 2320  # was None, shown as "—"
    # After a JSON round trip (--report-only reads the dated file) the copies are
    # separate dicts: still counted once.
    import json

    again = json.loads(json.dumps({f"{s}/{v}": c for (s, v), c in cells.items()}))
    assert run.ours_row("W3", again)["pairs"] == len(distinct)


def test_the_run_measures_the_targets_workloads_first_and_w4_w3_last():
    assert sorted(rows.WORKLOADS) == sorted(rows.RUN_ORDER)
    assert rows.RUN_ORDER[:3] == ["W1", "W2", "ceiling"]
    assert rows.RUN_ORDER[-2:] == ["W4", "W3"]
    assert rows.size_args("ours", "W2", False, None) == []
    assert rows.size_args("rq", "W2", False, None, "tuned") == ["--n", "1000"]
    assert rows.size_args("rq", "W3", True, None) == ["--quick", "--duration", "5"]


def test_a_cell_not_reached_yet_gives_no_row(monkeypatch):
    """Checkpoints come after every pair: an empty row would replace the row's carried-over
    figures of an earlier day in summary.json."""
    fake_runs(monkeypatch)
    cells = {("celery", "default"): {"pairs": []}}
    cells.update(pairs.run_chain([("rq", "default")], "W3", {"ours": "py", "rq": "py"}, 1,
                                 False, None, Path("/tmp")))
    summary = run.summarise("W3", cells, "2026-12-02", False)
    assert "celery" not in summary
    assert summary["rq"]["default"]["pairs"] == 1


def test_a_w3_row_summarised_with_n_0_shows_no_n_not_0_00():
    import report

    line = report.table("W3", {"ours": {"default": {
        "n": 0, "figure": {"median": 46.9, "range": [7.1, 148.0], "n": 36},
        "durable_history": True, "unit": "ms", "pairs": 36}}})[4]
    assert "| 0.00 |" not in line and "| — |" in line


def test_the_w3_target_says_whether_ours_is_at_or_below_celery_tuned():
    import report

    def summary(ratio):
        return {"W3": {"celery": {"tuned": {
            "label": "Celery", "variant": "tuned", "unit": "ms", "pairs": 5,
            "figure": {"median": 2.5, "range": [2.1, 2.8], "n": 5},
            "ours": {"median": 2.5 / ratio, "range": [1.6, 2.5], "n": 5},
            "ratio": {"median": ratio, "range": [ratio, ratio], "n": 5}}}}}

    held, = [line for line in report.targets(summary(1.21)) if "**W3**" in line]
    assert "1.21x (holds)" in held and "ours 2.07 (1.60-2.50)" in held
    missed, = [line for line in report.targets(summary(0.28)) if "**W3**" in line]
    assert "0.28x (misses)" in missed
    assert not [line for line in report.targets({}) if "**W3**" in line]


def test_the_w1_floor_weighs_ours_cpu_per_job_against_the_rate_pgqueuer_reached(tmp_path):
    import json

    import floors

    def floor(ours_pg, ours_total, reached, **extra):
        path = tmp_path / f"{ours_pg}-{ours_total}-{reached}.json"
        path.write_text(json.dumps({
            "date": "2026-12-07", "hardware": "Some CPU, 2 cores, 8 GiB RAM, Linux, Python",
            "cpu_us_per_job": {"postgresql": ours_pg, "total": ours_total},
            "pgqueuer": {"jobs_per_s": reached, "cpu_us_per_job": {"total": 31.0}},
            **extra}))
        return floors.w1_floor(path)

    # PostgreSQL's share alone allows 2e6 / 80 = 25,000 jobs/s, below 30,000.
    assert "a floor even for a client" in floor(80.0, 120.0, 30_000)
    # All of ours' CPU allows 2e6 / 80 = 25,000, PostgreSQL's share 43,478: the client's.
    today = floor(46.0, 80.0, 30_000)
    assert "Some CPU, 2 cores)" in today and "allow ours 25,000 jobs/s" in today
    assert "a floor of today's CPU per job" in today and "43,478" in today
    assert "no floor" in floor(46.0, 80.0, 20_000)
    assert floor(46.0, 80.0, 30_000, without_fks=True) is None
    assert floors.w1_floor(tmp_path / "missing.json") is None


def test_the_enqueue_lines_weigh_ours_against_each_django_vtasks_row_and_its_floor(tmp_path):
    import json

    import floors

    def lines(valkey, db, floor):
        """``valkey`` and ``db``: (wall ratio, CPU ratio) of ours against each row, ours
        taking 1.5 ms on Valkey and 1.0 on the database, wall and CPU alike."""
        def row(ratios, ours_ms):
            return {"pairs": [{}, {}, {}], "summary": {
                name: {"ours": ours_ms, "row": ours_ms * ratio, "ours_over_row": ratio}
                for name, ratio in zip(("outside_wall_ms", "outside_cpu_ms"), ratios,
                                       strict=True)}}
        path = tmp_path / "enqueue.json"
        path.write_text(json.dumps({"measured": "2026-12-08T02:00:00+00:00", "floor": floor,
                                    "rows": {"vtasksvk": row(valkey, 1.5),
                                             "vtasks": row(db, 1.0)}}))
        return floors.enqueue_lines(path)

    bare = {"postgresql_insert": {"wall_ms": 0.33, "cpu_ms": 0.07},
            "redis_lpush": {"wall_ms": 0.06, "cpu_ms": 0.04},
            "our_statement": {"wall_ms": 0.5, "cpu_ms": 0.12},
            "our_statement_redis": {"wall_ms": 0.45, "cpu_ms": 0.1}}
    # Valkey's row at 0.15 ms wall allows ours 0.30, below the bare 0.39: a floor for any
    # durable enqueue; its CPU, 0.15 ms too, allows 0.30, above the bare 0.11 and our
    # statement's 0.14 with the round trip: ours to close.
    valkey, db = lines((0.10, 0.10), (0.72, 0.72), bare)
    assert "Redis broker" in valkey and "0.10x wall" in valkey and "(misses)" in valkey
    assert ("wall: held by the floor of any durable enqueue (a bare INSERT's commit and a "
            "Redis round trip), 0.39 ms, above the 0.30") in valkey
    assert "CPU: no floor: the floor of today's two rows (the statement ours sends" in valkey
    assert "and ours, at 1.50, is 1.20 ms over, ours to close" in valkey
    # Valkey's row at 0.24 ms (ratio 0.16 of 1.5) allows 0.48: above the bare 0.39, below
    # our statement's 0.51 with the round trip: a floor of today's two rows.
    valkey, _ = lines((0.16, 0.5), (1.0, 1.0), bare)
    assert "wall: held by the floor of today's two rows" in valkey and "CPU:" not in valkey
    # The database row at 0.72 ms, above our statement's 0.5: no floor on either figure.
    assert "database broker" in db and "(misses)" in db
    assert "wall: no floor" in db and "CPU: no floor" in db
    # A database row faster than our statement alone: a floor of our two rows.
    _, db = lines((0.10, 0.10), (0.4, 0.4), bare)
    assert ("wall: held by the floor of today's two rows (the statement ours sends, alone), "
            "0.50 ms") in db
    # Only the CPU misses: the line misses, and names the CPU's floor only.
    _, db = lines((0.6, 0.6), (1.2, 0.9), bare)
    assert "(misses)" in db and "CPU: no floor" in db and "wall:" not in db
    # Met, at the bounds themselves: no floor clause.
    valkey, db = lines((0.5, 0.5), (1.0, 1.0), bare)
    assert valkey.endswith("(holds).") and db.endswith("(holds).")
    # No floor measured: the verdict alone.
    valkey, _ = lines((0.10, 0.10), (1.0, 1.0), {})
    assert valkey.endswith("(misses).")
    assert floors.enqueue_lines(tmp_path / "missing.json") == []
