"""`ccb netinit`: iptables rules that send the app's outbound TCP to the sidecar.

What a mesh's init container does (Istio's `istio-iptables`), for the pod's network namespace:
every new outbound TCP connection is REDIRECTed to the sidecar's transparent listener, except
connections opened by the sidecar's own uid (or the sidecar would loop into itself), to loopback
(the app talking to its own sidecar or to a local helper), and to excluded ports. Rules live in
one chain of the nat table, `CCB_OUTPUT`, so `--clean` removes exactly what was installed.
Debian's `iptables` (the nf_tables backend) runs them.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

CHAIN = "CCB_OUTPUT"


class NetinitError(RuntimeError):
    """iptables is missing or refused a rule; the message says which."""


@dataclass(frozen=True)
class InterceptionRules:
    """What to redirect where."""

    proxy_port: int
    proxy_uid: int
    exclude_ports: tuple[int, ...] = ()

    def ruleset(self) -> str:
        """The rules as `iptables-restore --noflush` input (declaring the chain flushes it)."""
        lines = [
            "*nat",
            f":{CHAIN} - [0:0]",
            f"-A {CHAIN} -m owner --uid-owner {self.proxy_uid} -j RETURN",
            f"-A {CHAIN} -d 127.0.0.0/8 -j RETURN",
        ]
        lines += [f"-A {CHAIN} -p tcp --dport {p} -j RETURN" for p in self.exclude_ports]
        lines += [
            f"-A {CHAIN} -p tcp -j REDIRECT --to-ports {self.proxy_port}",
            f"-A OUTPUT -p tcp -j {CHAIN}",
            "COMMIT",
        ]
        return "\n".join(lines) + "\n"


def parse_ports(text: str) -> tuple[int, ...]:
    """`"6379, 5432"` -> (6379, 5432); ValueError naming a bad entry."""
    ports = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or not 0 < int(part) < 65536:
            raise ValueError(f"{part!r} is not a port")
        ports.append(int(part))
    return tuple(ports)


def iptables_binary() -> str:
    """The iptables command (Debian's alternative; the nft backend by default)."""
    binary = shutil.which("iptables")
    if binary is None:
        raise NetinitError("iptables is not installed (Debian package iptables)")
    return binary


def _run(argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False)


def clean(binary: str | None = None) -> int:
    """Remove the jump from OUTPUT and the chain; returns how many jumps were removed."""
    iptables = binary or iptables_binary()
    removed = 0
    # A jump installed twice (by hand, or two runs racing) is removed as many times as it is there.
    while _run([iptables, "-t", "nat", "-D", "OUTPUT", "-p", "tcp", "-j", CHAIN]).returncode == 0:
        removed += 1
    if _run([iptables, "-t", "nat", "-n", "-L", CHAIN]).returncode == 0:
        for action in ("-F", "-X"):
            done = _run([iptables, "-t", "nat", action, CHAIN])
            if done.returncode != 0:
                raise NetinitError(f"iptables {action} {CHAIN}: {done.stderr.strip()}")
    return removed


def install(rules: InterceptionRules, binary: str | None = None) -> None:
    """Install the rules in the current network namespace (replacing an earlier install)."""
    iptables = binary or iptables_binary()
    clean(iptables)
    done = _run([f"{iptables}-restore", "--noflush"], stdin=rules.ruleset())
    if done.returncode != 0:
        raise NetinitError(f"iptables-restore: {done.stderr.strip() or 'failed'}")


def listing(binary: str | None = None) -> str:
    """The nat rules as `iptables -S` prints them (what the tests and `--dry-run` show)."""
    done = _run([binary or iptables_binary(), "-t", "nat", "-S"])
    if done.returncode != 0:
        raise NetinitError(f"iptables -S: {done.stderr.strip()}")
    return done.stdout
