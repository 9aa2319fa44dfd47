"""`ccb sidecar --config FILE`: validate, then exec the serving process.

This process reads the YAML and validates it with pydantic (exit 2 naming the key, as
always), then replaces itself (`os.execv`, same PID) with `python -m cascadebreaker.sidecar.serve`
and hands the validated config over in an anonymous file: the serving process never imports
pydantic, yaml or the rest of `ccb`, ~15 MB less per sidecar (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from cascadebreaker.sidecar.config import ConfigError, SidecarConfig, config_to_dict
from cascadebreaker.sidecar.schema import load_config, parse_config

SERVE_MODULE = "cascadebreaker.sidecar.serve"


def register(subparsers: Any) -> None:
    """Add the `sidecar` subcommand."""
    add_arguments(subparsers.add_parser("sidecar", help="run the sidecar proxy"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sidecar's arguments (`ccb sidecar` and `python -m cascadebreaker.sidecar` alike)."""
    parser.add_argument("--config", required=True, metavar="FILE", help="YAML configuration")
    parser.add_argument(
        "--listen",
        action="append",
        default=[],
        metavar="NAME=ADDR",
        help="override listen.NAME (an injector pins the ports its manifests rely on)",
    )
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    """Load the config (exit 2 when invalid) and serve until SIGTERM (exit 0)."""
    # Before gRPC loads: its core writes a line to stderr for every failed TLS handshake, so
    # any client could fill the log. Its errors still show; GRPC_VERBOSITY=INFO shows the rest.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from cascadebreaker.sidecar.grpc.tls import TlsError, read_material

    try:
        config = override_listeners(load_config(args.config), args.listen)
        if config.grpc_tls is not None:
            tls = config.grpc_tls
            read_material(tls.cert, tls.key, tls.ca)  # unreadable or mismatched files: exit 2
    except (ConfigError, TlsError) as exc:
        print(f"ccb sidecar: invalid config {args.config}: {exc}", file=sys.stderr)
        return 2
    return exec_serve(config, args.config)


def override_listeners(config: SidecarConfig, overrides: list[str]) -> SidecarConfig:
    """`config` with `NAME=HOST:PORT` overrides of its listeners, validated like the file."""
    if not overrides:
        return config
    listen: dict[str, Any] = config_to_dict(config)["listen"]
    for item in overrides:
        name, sep, address = item.partition("=")
        if not sep or name not in listen:
            raise ConfigError(
                f"--listen {item}: must be NAME=HOST:PORT, NAME one of {list(listen)}"
            )
        listen[name] = None if address in ("", "null") else address
    return parse_config({**config.source, "listen": listen})


def exec_serve(config: SidecarConfig, shown_path: str) -> int:
    """Replace this process with the serving one, `config` in an inherited anonymous file.

    Serves in this process instead when the interpreter cannot be executed again."""
    from cascadebreaker.sidecar.serve import serve

    if not sys.executable:
        return serve(config)
    fd = _anonymous_file(json.dumps(config_to_dict(config)).encode())
    # The interpreter's own options (-X, -W, -O, -I, ...), passed on as multiprocessing does.
    flags: list[str] = getattr(subprocess, "_args_from_interpreter_flags", list)()
    argv = [sys.executable, *flags, "-m", SERVE_MODULE, str(fd), "--config", shown_path]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, argv)
    except OSError:
        os.close(fd)
    return serve(config)


def _anonymous_file(payload: bytes) -> int:
    """An inheritable descriptor of a nameless file holding `payload`, read from offset 0."""
    if hasattr(os, "memfd_create"):  # Linux: no file system needed (read-only root is fine)
        fd = os.memfd_create("ccb-sidecar-config", 0)
    else:
        with tempfile.TemporaryFile() as nameless:
            fd = os.dup(nameless.fileno())
    os.write(fd, payload)
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd
