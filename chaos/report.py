"""How a scenario's figures are printed and stored (docs/reliability.md, "Output")."""

import json
from pathlib import Path

from chaos.invariants import Result


def lines(result: Result) -> list[str]:
    """The printed summary of one scenario, one figure per line."""
    dup_unexplained = len(result.unexplained_duplicates)
    out = [
        f"scenario             {result.scenario} (seed {result.seed}, {result.elapsed_s} s)",
        f"jobs                 {result.jobs}",
        f"runs                 {result.runs}  states {result.states}",
        f"attempts by outcome  {result.outcomes}",
        f"faults injected      {result.faults}",
        f"runs lost            {result.lost}  (not terminal {result.not_terminal}, "
        f"cron occurrences missing {result.missing_occurrences}, one-off jobs without a run "
        f"{result.one_off_without_run})",
        f"duplicate run rows   {result.duplicate_runs}",
        f"duplicate executions {result.duplicate_executions}  (explained by an expired lease "
        f"{result.duplicate_executions - min(dup_unexplained, result.duplicate_executions)}, "
        f"unexplained {dup_unexplained})",
        f"max lateness         {result.max_lateness_s} s  (p99 {result.p99_lateness_s} s, "
        f"early starts {result.early_starts}, catch-up runs excluded {result.catch_up_runs})",
        f"recovery (max)       {result.recovery_s} s",
    ]
    for fault in result.fault_log:
        recovery = "n/a" if fault.recovery_s is None else f"{fault.recovery_s} s"
        out.append(f"  fault {fault.kind} {fault.target}: recovered in {recovery}")
    out += [f"note                 {note}" for note in result.notes]
    failures = result.all_failures()
    out.append("verdict              " + ("PASS" if not failures else "FAIL"))
    out += [f"  broken: {problem}" for problem in failures]
    return out


def merge_json(path: Path, result: Result) -> None:
    """Write ``result.as_json()`` into the JSON list at ``path``, replacing the entry of
    the same scenario (the file keeps one object per scenario, in the order of SCENARIO_NAMES)."""
    from chaos.scenarios import SCENARIO_NAMES

    entries = json.loads(path.read_text()) if path.exists() else []
    entries = [e for e in entries if e.get("scenario") != result.scenario]
    entries.append(result.as_json())
    entries.sort(key=lambda e: SCENARIO_NAMES.index(e["scenario"]))
    path.write_text(json.dumps(entries, indent=2) + "\n")
