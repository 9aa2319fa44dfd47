"""`ccb`: the command line. Each part of the product registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Which module contributes each subcommand; each module has `register(subparsers)`. Only the module
# of the command being run is imported, so `ccb sidecar` never loads the demo's libraries (memory).
_COMMANDS = {
    "showcase": "cascadebreaker.showcase",
    "sidecar": "cascadebreaker.sidecar.command",
    "demo": "cascadebreaker.demo.command",
    "fault": "cascadebreaker.demo.command",
    "experiment": "cascadebreaker.demo.command",
    "inject": "cascadebreaker.kube.command",
    "injector": "cascadebreaker.kube.command",
    "netinit": "cascadebreaker.kube.command",
    "dashboard": "cascadebreaker.dashboard.command",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the `ccb` parser: with `command`, only its module's subcommands; else all of them."""
    parser = argparse.ArgumentParser(prog="ccb", description="cascadebreaker command line")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = (
        [_COMMANDS[command]] if command in _COMMANDS else list(dict.fromkeys(_COMMANDS.values()))
    )
    for module_name in wanted:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("cascadebreaker"):
                raise
            names = [c for c, m in _COMMANDS.items() if m == module_name]
            for name in names:
                sub = subparsers.add_parser(name, help=f"(needs {exc.name})")
                sub.set_defaults(handler=_missing_extra(exc.name or "?"))
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
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
