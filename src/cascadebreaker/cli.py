"""`ccb`: the command line. Each part of the product registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that contribute subcommands; each has `register(subparsers)`. Optional extras may be
# missing, so a module that fails to import only loses its own subcommands.
_COMMAND_MODULES = (
    "cascadebreaker.showcase",
    "cascadebreaker.sidecar.command",
    "cascadebreaker.demo.command",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the `ccb` argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(prog="ccb", description="cascadebreaker command line")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("cascadebreaker"):
                continue  # that part is not built yet
            missing = exc.name
            sub = subparsers.add_parser(module_name.rsplit(".", 2)[-2], help=f"(needs {missing})")
            sub.set_defaults(handler=_missing_extra(missing or "?"))
            continue
        module.register(subparsers)
    return parser


def _missing_extra(name: str):  # type: ignore[no-untyped-def]
    def handler(_args: argparse.Namespace) -> int:
        print(
            f"ccb: this command needs the '{name}' package; pip install 'cascadebreaker[all]'",
            file=sys.stderr,
        )
        return 2

    return handler


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ccb` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
