"""``arena evolve [overrides]``: the self-evolving loop (evaluate, analyse gaps, synthesize targeted tasks,
train), round after round; resumable after a kill. Keys: ``conf/evolve.yaml`` (docs/evolve.md)."""

from __future__ import annotations

import argparse
import asyncio
import json

from omegaconf import OmegaConf
from rich.console import Console

from arena.cli.hydra_config import ConfigError, compose_raw, load

console = Console()
err_console = Console(stderr=True)


def cmd_evolve(args: argparse.Namespace) -> int:
    from transformers.utils import logging as transformers_logging

    from arena.evolve.loop import evolve
    from arena.evolve.settings import EvolveError, EvolveSettings
    from arena.models.catalog import UnknownModel
    from arena.models.convert import ModelError
    from arena.runtime.errors import InfrastructureError
    from arena.store import StoreError
    from environments.registry import UnknownEnvironment
    from environments.sdk.environment import EnvironmentSpecError

    transformers_logging.disable_progress_bar()  # the loop shows its own progress
    try:
        if args.cfg:
            print(OmegaConf.to_yaml(compose_raw("evolve", args.overrides)))
            return 0
        settings = load("evolve", args.overrides, EvolveSettings)
        outcome = asyncio.run(evolve(settings, console))
    except (
        ConfigError,
        EvolveError,
        UnknownEnvironment,
        EnvironmentSpecError,
        StoreError,
        ModelError,
        UnknownModel,
    ) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 2
    except InfrastructureError as exc:
        err_console.print(f"[red]error:[/red] environment runtime failed (re-run to resume): {exc}")
        return 1
    line = outcome.line()
    gains = " -> ".join(f"{s:.1%}" for s in line["heldout_success_per_round"])
    console.print(f"held-out success per round: {gains} (report: {line['report']})", highlight=False)
    print(json.dumps(line), flush=True)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evolve",
        help="the self-evolving loop: eval, gap analysis, targeted synthesis, training (Hydra overrides)",
        description=__doc__,
    )
    parser.add_argument("--cfg", choices=["job"], help="print the composed configuration and exit")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. rounds=4 trainer=local")
    parser.set_defaults(func=cmd_evolve)
