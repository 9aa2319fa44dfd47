"""Free TCP ports for tests and harnesses, picked below the kernel's ephemeral range.

A port asked of the kernel (`bind(0)`) comes from the ephemeral range, the same range outgoing
connections take their local ports from: between the moment a harness picks one and the moment
its server binds it, any connection on the machine (to Redis, to an upstream, another test
run's) can take it, and the server fails with "address already in use". Below that range only
a server binding it on purpose can take it, and a port some server holds fails the test bind.

A harness asks for all its ports before it starts its servers, so a port handed out is still
free when the next is picked: the last ports handed out are remembered and never handed out
again while remembered (without that, a dozen picks among ~12,000 repeat one in ~200 runs).
"""

from __future__ import annotations

import random
import socket
import threading
from collections import deque
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_SPAN = 12000  # ports tried below the ephemeral range
_TRIES = 200
_REMEMBERED = 4096  # ports handed out lately (a third of the span: picks stay cheap)
_handed: deque[int] = deque(maxlen=_REMEMBERED)
_handed_set: set[int] = set()
_lock = threading.Lock()


def _hand_out(port: int) -> int:
    with _lock:
        if len(_handed) == _REMEMBERED:
            _handed_set.discard(_handed[0])  # the deque drops it on append
        _handed.append(port)
        _handed_set.add(port)
    return port


def ephemeral_range() -> tuple[int, int]:
    """The kernel's (low, high) ephemeral port range (Linux's default where unreadable)."""
    try:
        low, high = (int(part) for part in _RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing held a moment ago, outside the ephemeral range when
    that leaves room (else one the kernel picks)."""
    low, _high = ephemeral_range()
    first = max(1024, low - _SPAN)
    for _ in range(_TRIES if low - first >= 1000 else 0):
        port = random.randrange(first, low)
        if port in _handed_set:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return _hand_out(port)
    with socket.socket() as s:
        s.bind((host, 0))
        return _hand_out(int(s.getsockname()[1]))
