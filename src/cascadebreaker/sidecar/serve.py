"""The serving process: `ccb sidecar` validates the config, then execs `python -m
cascadebreaker.sidecar.serve FD`, FD an anonymous file holding the validated config as JSON.

Built from that form with the plain classes of `config.py`: pydantic, yaml and the CLI are
never imported here (tests/sidecar/test_lazy_imports.py checks the running process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
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

    async def run() -> None:
        await SidecarServer(config).run()
        _ignore_stop_signals()

    try:
        _run(run())
    except OSError as exc:
        print(f"ccb sidecar: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0


def _ignore_stop_signals() -> None:
    """Drained: a repeated SIGTERM (supervisors send more than one) must not kill the rest of
    the teardown. Closing the loop would put back the default action, which dies by the
    signal; taking the handlers off here first leaves the loop nothing to put back."""
    loop = asyncio.get_running_loop()
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    # Blocked while swapping: removing the loop's handler puts back the default action for a
    # moment, and a signal landing then would kill us. Pending ones are dropped once ignored.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        for sig in stop_signals:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)


def _run(coro: Any) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


if __name__ == "__main__":
    sys.exit(main())
