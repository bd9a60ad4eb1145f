"""``arena eval [--multirun] [overrides]``: evaluate policies on suites, store every episode, report.

Examples: ``arena eval policy=reference suite=core tasks_per_env=5``;
``arena eval --multirun policy=reference,random suite=core,agentworld`` (one run per combination, each
resumable, then a report comparing them). Keys: ``conf/eval.yaml`` and its groups (docs/evaluation.md).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from typing import TYPE_CHECKING

from omegaconf import OmegaConf
from rich.console import Console

from arena.cli.hydra_config import ConfigError, compose_raw, expand_sweep, load
from arena.eval.settings import EvalSettings

if TYPE_CHECKING:
    from arena.eval.runner import RunOutcome

console = Console()
err_console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> int:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return code


def _print_line(data: dict[str, object]) -> None:
    print(json.dumps(data, default=str), flush=True)


def _sweep_report(run_ids: list[str], url: str | None) -> str:
    from arena.eval.report import write_report
    from arena.store import Database, RunStore
    from environments.paths import arena_home

    name = "sweep-" + hashlib.sha256(" ".join(run_ids).encode()).hexdigest()[:10]
    db = Database(url)
    try:
        return str(write_report(RunStore(db), run_ids, arena_home() / "reports" / name).markdown)
    finally:
        db.close()


def cmd_eval(args: argparse.Namespace) -> int:
    from arena.eval.runner import run_eval
    from arena.eval.suites import SuiteError
    from arena.policies.base import PolicyRefused, PolicyRequestInvalid
    from arena.runtime.errors import InfrastructureError
    from arena.store import StoreError
    from environments.registry import UnknownEnvironment
    from environments.sdk.environment import EnvironmentSpecError

    try:
        jobs = expand_sweep(args.overrides) if args.multirun else [args.overrides]
        if args.cfg:
            for overrides in jobs:
                print(OmegaConf.to_yaml(compose_raw("eval", overrides)))
            return 0
        settings = [load("eval", overrides, EvalSettings) for overrides in jobs]
    except ConfigError as exc:
        return _fail(str(exc))
    outcomes: list[RunOutcome] = []
    for index, job in enumerate(settings, start=1):
        if len(settings) > 1:
            console.rule(f"run {index}/{len(settings)}: policy={job.policy.kind} suite={job.suite.name}")
        try:
            outcome = asyncio.run(run_eval(job, console))
        except (ConfigError, SuiteError, UnknownEnvironment, EnvironmentSpecError, StoreError) as exc:
            return _fail(str(exc))
        except PolicyRefused as exc:
            said = (
                str(exc)
                if isinstance(exc, PolicyRequestInvalid)
                else f"the policy refused the first request: {exc}"
            )
            return _fail(f"{_one_line(said)} (a configuration error: check policy.* and the server)")
        except InfrastructureError as exc:
            return _fail(
                f"environment runtime failed (finished episodes are stored; re-run to resume): {exc}", 1
            )
        outcomes.append(outcome)
        if len(settings) > 1:
            _print_line(outcome.line())
    if len(outcomes) == 1:
        _print_line(outcomes[0].line())
    else:
        report = _sweep_report([o.run_id for o in outcomes], settings[0].store.url)
        _print_line({"runs": [o.run_id for o in outcomes], "report": report})
    return _infra_summary(outcomes, settings)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _infra_summary(outcomes: list[RunOutcome], settings: list[EvalSettings]) -> int:
    """Print each run's infrastructure errors with their top reasons (stderr); 1 when a run has more than
    its ``max_infra_share`` of them, else 0."""
    code = 0
    for outcome, job in zip(outcomes, settings, strict=True):
        infra, total = outcome.headline["infra_errors"], outcome.headline["episodes"]
        if not infra:
            continue
        reasons = "; ".join(f"{count}x {reason}" for reason, count in outcome.infra_reasons)
        err_console.print(
            f"{outcome.run_id}: {infra} of {total} episodes are infrastructure errors "
            f"({outcome.infra_share:.0%}, not scored; a re-run replays them): {reasons}",
            highlight=False,
            soft_wrap=True,
        )
        if outcome.infra_share > job.max_infra_share:
            code = _fail(
                f"{outcome.run_id}: more than max_infra_share={job.max_infra_share:g} of the episodes are "
                "infrastructure errors; its success rate is not trustworthy",
                1,
            )
    return code


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a policy on a suite (Hydra overrides; --multirun sweeps)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--multirun", "-m", action="store_true", help="one run per combination of swept values"
    )
    parser.add_argument("--cfg", choices=["job"], help="print the composed configuration and exit")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. policy=random tasks_per_env=3")
    parser.set_defaults(func=cmd_eval)
