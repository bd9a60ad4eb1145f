"""Does gap targeting earn the gain? ``arena evolve`` with ``targeted.mode=gap`` and ``=uniform`` (the
gap-blind control) from the same round 0, ``--seeds`` seeds each (synthesis ``seed`` and sampling
``trainer.seed``), every round's SFT on the same ``--sft-tokens`` tokens (equal compute, recorded).

Usage: python benchmarks/evolve_control.py [--seeds 3] [--rounds 1] [--sft-tokens 90000] [--out DIR]
       [-- evolve overrides...]

Round 0 (sets, warm start, evaluation) runs once as ``<prefix>-r0``; each arm starts from it
(``from_round0``), so it is paid for once. A rerun with the same ``--out`` skips the runs that finished
and resumes the one that stopped. Everything runs through the real CLI on one SQLite store under
``--out``. Prints a table per round (each arm's held-out success, mean over seeds; gap - uniform paired over
held-out tasks with its 95% interval and exact McNemar p; the environments never trained on; tokens trained)
and writes ``control.md`` and ``control.png``. The last line printed is one JSON object: ``rounds``,
``gap_success_per_round``, ``uniform_success_per_round`` (round 0 first), ``difference_ci95`` and
``p_value`` (rounds 1.., the last round's p), ``tokens_gap``, ``tokens_uniform`` (per round, mean over
seeds), ``wall_s``, and the detail behind them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from arena.evolve.control import ARMS, HEADER, compare, table_rows, write_control_report  # noqa: E402
from arena.store import Database, RunStore  # noqa: E402

console = Console(stderr=True)
ATTEMPTS = 2
"""Runs of one configuration before giving up: exit status 1 (an infrastructure failure) is resumed once."""


def finished(store: str, run_id: str) -> bool:
    """Whether ``run_id`` finished already in ``store`` (a rerun of the benchmark skips it)."""
    db = Database(store)
    try:
        return RunStore(db).get(run_id).status == "finished"
    except KeyError:
        return False
    finally:
        db.close()


def evolve(overrides: list[str], store: str, out: Path, run_id: str, *extra: str) -> None:
    """One ``arena evolve`` run through the CLI, unless it finished already (it resumes if it started)."""
    if finished(store, run_id):
        console.print(f"[bold]{run_id}[/bold]: finished already")
        return
    args = [
        sys.executable,
        "-m",
        "arena.cli.main",
        "evolve",
        *overrides,
        f"store.url={store}",
        f"report.dir={out / 'runs'}",
        f"run_id={run_id}",
        *extra,
    ]
    console.print(f"[bold]{run_id}[/bold]: arena evolve {' '.join(args[4:])}", highlight=False)
    for attempt in range(1, ATTEMPTS + 1):  # a run that stopped (e.g. Ray failed to start) resumes
        done = subprocess.run(args, capture_output=True, text=True, env=os.environ.copy(), check=False)
        if done.returncode != 1 or attempt == ATTEMPTS:
            break
        last = (done.stderr or done.stdout).strip().splitlines()[-1:]
        console.print(f"{run_id} stopped ({last}); resuming")
    if done.returncode != 0:
        raise SystemExit(
            f"{run_id} failed ({done.returncode}; rerun to resume): {(done.stderr or done.stdout)[-2000:]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sft-tokens", type=int, default=90_000, help="SFT tokens per round, each arm")
    parser.add_argument("--out", type=Path, default=Path("evolve-control"))
    parser.add_argument("--prefix", default="control")
    parser.add_argument("overrides", nargs="*", help="arena evolve overrides (after --)")
    args = parser.parse_args()
    started = time.monotonic()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{out / 'control.db'}"
    round0 = f"{args.prefix}-r0"
    evolve(args.overrides, store, out, round0, "rounds=0")
    arms: dict[str, list[str]] = {mode: [] for mode in ARMS}
    for seed in range(args.seeds):
        for mode in ARMS:
            run_id = f"{args.prefix}-{mode}-s{seed}"
            evolve(
                args.overrides,
                store,
                out,
                run_id,
                f"rounds={args.rounds}",
                f"from_round0={round0}",
                f"targeted.mode={mode}",
                f"targeted.sft_tokens={args.sft_tokens}",
                f"seed={seed}",
                f"trainer.seed={seed}",
            )
            arms[mode].append(run_id)
    db = Database(store)
    try:
        result = compare(RunStore(db), arms)
    finally:
        db.close()
    report = write_control_report(result, arms, out)
    table = Table(title=f"gap vs uniform from the same round 0 ({result['seeds']} seeds)")
    for name in HEADER:
        table.add_column(name)
    for row in table_rows(result):
        table.add_row(*row)
    Console(width=180).print(table)
    print(f"report: {report}")
    print(json.dumps(result | {"wall_s": round(time.monotonic() - started, 1), "report": str(report)}))


if __name__ == "__main__":
    main()
