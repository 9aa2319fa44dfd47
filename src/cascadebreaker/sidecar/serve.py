"""The serving process: `ccb sidecar` validates the config, then execs `python -m
cascadebreaker.sidecar.serve FD`, FD an anonymous file holding the validated config as JSON.

Built from that form with the plain classes of `config.py`: pydantic, yaml and the CLI are
never imported here (tests/sidecar/test_lazy_imports.py checks the running process).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

from cascadebreaker.sidecar.config import SidecarConfig, config_from_dict


def main(argv: list[str] | None = None) -> int:
    """`FD [--config FILE]`: serve the config in FD (`--config` only names it in `ps`)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or not args[0].isdigit():
        print("usage: python -m cascadebreaker.sidecar.serve FD [--config FILE]", file=sys.stderr)
        return 2
    with os.fdopen(int(args[0]), "rb") as handed_over:
        handed_over.seek(0)
        config = config_from_dict(json.loads(handed_over.read()))
    return serve(config)


def serve(config: SidecarConfig) -> int:
    """Run a sidecar in this process (uvloop when installed)."""
    from cascadebreaker.sidecar.server import SidecarServer

    logging.basicConfig(
        level=config.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    try:
        _run(SidecarServer(config).run())
    except OSError as exc:
        print(f"ccb sidecar: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0


def _run(coro: Any) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


if __name__ == "__main__":
    sys.exit(main())
