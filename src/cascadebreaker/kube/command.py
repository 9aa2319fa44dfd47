"""`ccb inject`, `ccb injector` and `ccb netinit`."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from cascadebreaker.kube.inject import InjectError, InjectOptions, inject, uninject


def register(subparsers: Any) -> None:
    """Add the Kubernetes subcommands."""
    p = subparsers.add_parser(
        "inject", help="add the sidecar to workloads annotated cascadebreaker.io/inject: enabled"
    )
    p.add_argument("file", nargs="?", default="-", help="manifests (YAML or JSON; '-' = stdin)")
    p.add_argument("--uninject", action="store_true", help="remove what inject added")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    _options_arguments(p)
    p.set_defaults(handler=run_inject)

    p = subparsers.add_parser("injector", help="serve injection as a mutating admission webhook")
    p.add_argument("--tls-cert", required=True, metavar="FILE", help="PEM certificate chain")
    p.add_argument("--tls-key", required=True, metavar="FILE", help="PEM private key")
    p.add_argument("--listen", default="0.0.0.0:8443", metavar="HOST:PORT")
    _options_arguments(p)
    p.set_defaults(handler=run_injector)

    p = subparsers.add_parser(
        "netinit", help="redirect this network namespace's outbound TCP to the sidecar (iptables)"
    )
    p.add_argument("--proxy-port", type=int, default=15003, help="the transparent listener port")
    p.add_argument("--proxy-uid", type=int, default=1337, help="the sidecar's uid (exempt)")
    p.add_argument("--exclude-ports", default="", metavar="P,P", help="destination ports to skip")
    p.add_argument("--clean", action="store_true", help="remove the rules instead")
    p.add_argument("--dry-run", action="store_true", help="print the rules, change nothing")
    p.set_defaults(handler=run_netinit)


def _options_arguments(p: argparse.ArgumentParser) -> None:
    d = InjectOptions()
    p.add_argument("--image", default=d.image, help=f"sidecar image (default {d.image})")
    p.add_argument("--image-pull-policy", default=d.image_pull_policy)
    p.add_argument("--secret", default=d.secret, help="Secret holding CCB_SECRET")
    p.add_argument("--proxy-uid", type=int, default=d.proxy_uid, dest="proxy_uid")


def _options(args: argparse.Namespace) -> InjectOptions:
    return InjectOptions(
        image=args.image,
        image_pull_policy=args.image_pull_policy,
        secret=args.secret,
        proxy_uid=args.proxy_uid,
    )


def run_inject(args: argparse.Namespace) -> int:
    """Read manifests, inject (or uninject) every document, write them back as YAML."""
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
    except OSError as exc:
        print(f"ccb inject: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        print(
            f"ccb inject: {args.file} is not valid YAML: {exc}".replace("\n", " "), file=sys.stderr
        )
        return 2
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            print(f"ccb inject: document {index + 1} is not a mapping", file=sys.stderr)
            return 2
    options = _options(args)
    try:
        out = [uninject(d) if args.uninject else inject(d, options) for d in docs]
    except InjectError as exc:
        print(f"ccb inject: {exc}", file=sys.stderr)
        return 2
    rendered = yaml.safe_dump_all(out, sort_keys=False, explicit_start=True)
    if args.output:
        Path(args.output).write_text(rendered, "utf-8")
    else:
        sys.stdout.write(rendered)
    return 0


def run_injector(args: argparse.Namespace) -> int:
    """Serve the webhook until SIGTERM."""
    from cascadebreaker.kube.injector import InjectorServer

    logging.basicConfig(level="INFO", stream=sys.stderr, format="%(asctime)s %(message)s")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        print("ccb injector: --listen must be host:port", file=sys.stderr)
        return 2
    try:
        server = InjectorServer(
            (host.strip("[]"), int(port)), args.tls_cert, args.tls_key, _options(args)
        )
    except OSError as exc:
        print(f"ccb injector: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _interrupt)
    logging.getLogger("cascadebreaker.kube.injector").info("injector on %s", args.listen)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    server.server_close()
    return 0


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt  # ends serve_forever() on the main thread, like Ctrl-C


def run_netinit(args: argparse.Namespace) -> int:
    """Install (or with --clean remove) the interception rules."""
    from cascadebreaker.kube import netinit

    try:
        rules = netinit.InterceptionRules(
            args.proxy_port, args.proxy_uid, netinit.parse_ports(args.exclude_ports)
        )
    except ValueError as exc:
        print(f"ccb netinit: --exclude-ports: {exc}", file=sys.stderr)
        return 2
    if not 0 < args.proxy_port < 65536:
        print("ccb netinit: --proxy-port must be a port", file=sys.stderr)
        return 2
    if args.dry_run:
        sys.stdout.write(rules.ruleset())
        return 0
    try:
        if args.clean:
            netinit.clean()
        else:
            netinit.install(rules)
    except netinit.NetinitError as exc:
        print(f"ccb netinit: {exc}", file=sys.stderr)
        return 1
    return 0
