"""``arena train trainer=verl model.path=... data.train_files=... [cluster.address=ray://...]``: RL training
with verl on a Ray cluster (docs/cluster.md). ``--cfg job`` prints the composed configuration (verl's own
``ppo_trainer`` with the arena's defaults) without running anything."""

from __future__ import annotations

import argparse

from omegaconf import OmegaConf
from rich.console import Console

from arena.cli.hydra_config import ConfigError

err_console = Console(stderr=True)


def cmd_train(args: argparse.Namespace) -> int:
    from arena.runtime.errors import InfrastructureError
    from trainers.verl.launch import compose_train, train

    try:
        config = compose_train(args.overrides, check_missing=not args.cfg)
        if args.cfg:
            print(OmegaConf.to_yaml(config))
            return 0
        if config.trainer.name != "verl":
            raise ConfigError(
                f"arena train runs trainer=verl; trainer={config.trainer.name} trains in arena evolve"
            )
        train(config)
    except ConfigError as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 2
    except InfrastructureError as exc:  # a local Ray that did not start
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="RL training with verl on a Ray cluster (Hydra overrides; verl's keys included)",
        description=__doc__,
    )
    parser.add_argument("--cfg", choices=["job"], help="print the composed configuration and exit")
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides, e.g. trainer=verl model.path=Qwen/Qwen3-4B"
    )
    parser.set_defaults(func=cmd_train)
