"""Results of the sidecar benchmark: medians over rounds, targets, and the markdown section."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from bench.sidecar.profile import Profile

SECTION = "## Sidecar"
RERUN = ".venv/bin/python -m bench sidecar"
SIDECARS = ("sidecar", "sidecar-client", "sidecar-server")
# The floors (bench/sidecar/floor_proxies.py): scenario names in every table.
RELAY_FLOOR = "floor: uvloop byte relay"
# Two relays in a row: what a pair costs on uvloop with no HTTP at all, about the least any
# pair driven by uvloop pays; native protocol objects would save only the relay's few lines of
# Python (docs/sidecar-performance.md, "A native data plane: measured, not built").
RELAY_FLOOR_PAIR = "floor: uvloop byte relay pair"
HTTPTOOLS_FLOOR = "floor: minimal httptools proxy"
HTTPTOOLS_FLOOR_PAIR = "floor: minimal httptools pair"
# The sidecar as pip installs it, and the opt-in mypyc build (`--compiled`): the scenario of
# one hop, its process, and the pair's scenario; the key is what a target's name gains.
COMPILED = " (compiled build)"
# Other processes' CPU over a run (steal included) from which its verdicts read the host: quiet
# runs measured 0.00-0.01, the two runs whose every proxy's p90 was in milliseconds 0.11-0.15.
BUSY_HOST_CPUS = 0.05
BUILDS = {
    "": ("sidecar (outbound)", "sidecar", "sidecar pair"),
    COMPILED: ("sidecar (outbound)" + COMPILED, "sidecar-compiled", "sidecar pair" + COMPILED),
}
ROUNDS_TEXT = (
    "A verdict is the medians' over the rounds; 'met in k of n rounds' judges each round on its"
    " own numbers (nginx's of the same round included). A target met in some rounds and missed"
    " in others sits within this run's noise; one met or missed in every round does not."
)
FLOOR_TEXT = (
    "The Python floor is a proxy that only parses the request and the response with httptools"
    " (the sidecar's parser) on uvloop (its event loop) and writes each head again: no limits,"
    " framing rules, pool or logic (bench/sidecar/floor_proxies.py), measured in this run like"
    ' the sidecar ("floor:" rows below). Where it misses a target too, no Python proxy on'
    " httptools + uvloop meets it and the verdict says so; where it meets it, the gap is ours."
    " For memory with a gRPC listener the floor is an empty grpc.aio server; for gRPC `Call`,"
    " a grpc.aio handler that makes the same upstream GET and nothing else. The same floors"
    " in instructions per request (callgrind): the section"
    " 'Sidecar: instructions per request' below. Two byte relays in a row (no HTTP) are about"
    " the least any pair driven by uvloop pays, native protocol objects included."
)


@dataclass
class Sample:
    """One cell of one round: latency percentiles (µs), throughput, CPU seconds per process."""

    p50: float
    p90: float
    p99: float
    rps: float
    requests: int
    errors: int
    cpu: dict[str, float]  # user + system
    cpu_system: dict[str, float] = field(default_factory=dict)  # of it, in the kernel


@dataclass
class Cell:
    """All rounds of one cell; medians on demand."""

    samples: list[Sample] = field(default_factory=list)

    def median(self, metric: Callable[[Sample], float]) -> float:
        """Median of a metric over rounds (NaN when never measured)."""
        values = [metric(s) for s in self.samples]
        return statistics.median(values) if values else math.nan

    def cpu_per_1k(self, proc: str) -> float:
        """CPU seconds of one process per 1000 requests (median over rounds)."""
        return self.median(lambda s: 1000 * s.cpu.get(proc, 0.0) / max(s.requests, 1))

    def user_cpu_per_1k(self, proc: str) -> float:
        """User-space CPU seconds (the process's own code) per 1000 requests, median; NaN when
        the split was not recorded."""
        if any(proc not in s.cpu_system for s in self.samples):
            return math.nan
        return self.median(
            lambda s: 1000 * (s.cpu.get(proc, 0.0) - s.cpu_system[proc]) / max(s.requests, 1)
        )

    @property
    def errors(self) -> int:
        """Errors over all rounds."""
        return sum(s.errors for s in self.samples)


@dataclass
class Report:
    """Everything one run measured."""

    scenarios: list[tuple[str, int, list[str]]]  # name, hops, measured process names
    wrk: dict[tuple[str, int], Cell] = field(default_factory=dict)
    paced: dict[str, Cell] = field(default_factory=dict)
    grpc: dict[tuple[str, int], Cell] = field(default_factory=dict)
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    pss_mb: dict[str, float] = field(default_factory=dict)  # at the end of the run
    grpc_listeners: tuple[str, ...] = ()  # sidecars with a gRPC listener (grpc is loaded)
    other_idle: tuple[str, Report] | None = None  # the same rounds in the other CPU idle mode
    import_rss_mb: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    profile: Profile | None = None
    profile_error: str = ""  # why there is no profile, when one was asked for
    environment: dict[str, str] = field(default_factory=dict)
    other_cpus: float | None = None  # CPUs other processes used meanwhile (steal included)


def failed_cells(report: Report) -> list[str]:
    """Cells with errors: their numbers measure failures, not the path (a broken proxy or
    floor must not pass for a fast one)."""
    cells = [
        *((f"{name} at {conns} conns (wrk)", c) for (name, conns), c in report.wrk.items()),
        *((f"{name} at 1000 rps", c) for name, c in report.paced.items()),
        *((f"{name} at {conns} conns (gRPC)", c) for (name, conns), c in report.grpc.items()),
    ]
    return [f"{what}: {cell.errors:,} errors" for what, cell in cells if cell.errors]


def _n(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def _p50(s: Sample) -> float:
    return s.p50


def _p90(s: Sample) -> float:
    return s.p90


def _p99(s: Sample) -> float:
    return s.p99


def _rps(s: Sample) -> float:
    return s.rps


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _cpu(cell: Cell, procs: list[str], user: bool = False) -> str:
    """CPU ms per 1000 requests, per proxy process (user space only when `user`)."""
    if not procs:
        return "-"
    per_1k = cell.user_cpu_per_1k if user else cell.cpu_per_1k
    parts = [_n(per_1k(p) * 1000) for p in procs]
    return parts[0] if len(parts) == 1 else " + ".join(parts)


def closed_loop(report: Report) -> list[str]:
    """The wrk table: every path at 1 and 16 connections."""
    rows = []
    for connections in (1, 16):
        direct = report.wrk.get(("direct", connections), Cell())
        for name, hops, procs in report.scenarios:
            cell = report.wrk.get((name, connections))
            if cell is None:
                continue
            added = ["-", "-"]
            if hops:
                added = [_n((cell.median(m) - direct.median(m)) / hops) for m in (_p50, _p99)]
            ratio = cell.median(_rps) / direct.median(_rps)
            rows.append(
                [
                    name,
                    str(connections),
                    _n(cell.median(_rps)),
                    f"{ratio:.2f}x",
                    _n(cell.median(_p50)),
                    _n(cell.median(_p90)),
                    _n(cell.median(_p99)),
                    *added,
                    _cpu(cell, procs),
                    str(cell.errors),
                ]
            )
    return _table(
        [
            "path",
            "conns",
            "req/s",
            "x direct",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "added p50 µs/hop",
            "added p99 µs/hop",
            "proxy CPU ms/1000 req",
            "errors",
        ],
        rows,
    )


def fixed_rate(report: Report) -> list[str]:
    """The 1000 rps table: added latency of each path over direct at the same rate."""
    direct = report.paced.get("direct", Cell())
    procs_of = {name: procs for name, _, procs in report.scenarios}
    rows = []
    for name, cell in report.paced.items():
        added = "-" if name == "direct" else _n(cell.median(_p90) - direct.median(_p90))
        rows.append(
            [
                name,
                _n(cell.median(_rps)),
                _n(cell.median(_p50)),
                _n(cell.median(_p90)),
                _n(cell.median(_p99)),
                added,
                _cpu(cell, procs_of.get(name, [])),
                _cpu(cell, procs_of.get(name, []), user=True),
                str(cell.errors),
            ]
        )
    return _table(
        [
            "path",
            "req/s",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "added p90 µs (path)",
            "proxy CPU ms/1000 req",
            "of it user space",
            "errors",
        ],
        rows,
    )


GRPC_FETCH = "grpc.aio server + bare upstream GET"
_GRPC_PROCS = {
    "sidecar Call": "sidecar",
    "sidecar Call" + COMPILED: "sidecar-compiled",
    GRPC_FETCH: "grpc-floor-fetch",
}


def grpc_table(report: Report) -> list[str]:
    """The gRPC Call path, and the floor: an empty grpc.aio server on the same client."""
    rows = []
    for (name, connections), cell in sorted(report.grpc.items(), key=lambda i: (i[0][1], i[0][0])):
        proc = _GRPC_PROCS.get(name, "grpc-floor")
        rows.append(
            [
                name,
                str(connections),
                _n(cell.median(_rps)),
                _n(cell.median(_p50)),
                _n(cell.median(_p90)),
                _n(cell.median(_p99)),
                _cpu(cell, [proc]),
                str(cell.errors),
            ]
        )
    return _table(
        [
            "server",
            "conns",
            "calls/s",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "server CPU ms/1000 calls",
            "errors",
        ],
        rows,
    )


def _hop(report: Report, name: str, metric: Callable[[Sample], float]) -> float:
    """Added latency per hop of a path at 1 connection (wrk)."""
    cell, direct = report.wrk.get((name, 1), Cell()), report.wrk.get(("direct", 1), Cell())
    return cell.median(metric) - direct.median(metric)


def _paced_added_p90(report: Report, name: str) -> float:
    """Added p90 of a whole path at 1000 rps."""
    cell, direct = report.paced.get(name, Cell()), report.paced.get("direct", Cell())
    return cell.median(_p90) - direct.median(_p90)


def _throughput(report: Report, name: str) -> float:
    """Requests/s at 16 connections as a fraction of direct."""
    cell, direct = report.wrk.get((name, 16), Cell()), report.wrk.get(("direct", 16), Cell())
    return cell.median(_rps) / direct.median(_rps)


def _worst_cpu(report: Report, names: tuple[str, ...], procs: tuple[str, ...]) -> float:
    """The highest CPU seconds per 1000 requests (= vCPU at 1000 rps) of `procs` at 1000 rps."""
    values = [
        report.paced[n].cpu_per_1k(p)
        for n in names
        if n in report.paced
        for p in procs
        if any(p in measured for name, _, measured in report.scenarios if name == n)
    ]
    return max(values) if values else math.nan


def _worst_rss(report: Report, procs: tuple[str, ...]) -> float:
    values = [v for k, v in report.peak_rss_mb.items() if k in procs]
    return max(values) if values else math.nan


NGINX = ("nginx-proxy", "nginx-front")


GRPC_SLACK_US = 60.0  # the sidecar's gRPC `Call` may add this much p50 over an empty server
ISTIO_PAIR_P90_US = 228.0  # Istio 1.20's sidecar pair, added p90 (published)
RSS_LIMIT_MB = 30.0


def _grpc_p50(report: Report, name: str) -> float:
    return report.grpc.get((name, 1), Cell()).median(_p50)


def _paced_cpu(report: Report, name: str, proc: str) -> float:
    """CPU ms per 1000 requests of one process at 1000 rps."""
    cell = report.paced.get(name)
    return math.nan if cell is None else 1000 * cell.cpu_per_1k(proc)


class Target(NamedTuple):
    """One row of the targets table: each column as shown."""

    what: str
    measured: str  # the sidecar's value
    verdict: str
    nginx: str  # nginx by the same measure
    floor: str  # the Python floor by the same measure


def _verdict(
    value: float, floor: float, limit: float, unit: str, higher_is_better: bool, digits: int
) -> str:
    """met; or MISSED by how much, and whether even the Python floor misses the target (then no
    Python proxy on httptools + uvloop meets it) or meets it (then the gap is the sidecar's)."""

    def meets(v: float) -> bool:
        return v >= limit if higher_is_better else v <= limit

    if meets(value):
        return "met"
    missed = f"MISSED by {abs(value - limit):,.{digits}f} {unit}"
    if math.isnan(floor):
        return missed
    if meets(floor):
        return f"{missed}: ours (the floor meets it)"
    return (
        f"{missed}: the target is below the Python floor "
        f"(the floor misses it by {abs(floor - limit):,.{digits}f} {unit})"
    )


def rounds(report: Report) -> int:
    """Rounds every measured cell has (cells are measured once per round, interleaved)."""
    cells = [*report.wrk.values(), *report.paced.values(), *report.grpc.values()]
    return min((len(c.samples) for c in cells), default=0)


def one_round(report: Report, index: int) -> Report:
    """The report as round `index` alone measured it (memory is measured once a run: kept)."""

    def pick(cells: Mapping[Any, Cell]) -> dict[Any, Cell]:
        return {key: Cell(cell.samples[index : index + 1]) for key, cell in cells.items()}

    return replace(
        report,
        wrk=pick(report.wrk),
        paced=pick(report.paced),
        grpc=pick(report.grpc),
        other_idle=None,
    )


def targets(report: Report) -> list[Target]:
    """Issue 13's targets, as ratios against nginx in the same run, each beside the Python floor
    (the minimal httptools proxy; for gRPC, the empty grpc.aio server) by the same measure.

    The verdict is the medians'; with two rounds or more it also says in how many rounds the
    target was met on that round's own numbers: a verdict that flips between rounds is within
    the run's noise (memory, measured once a run, is left out)."""
    out = _targets(report)
    count = rounds(report)
    if count < 2:
        return out
    met = dict.fromkeys((t.what for t in out), 0)
    for index in range(count):
        for single in _targets(one_round(report, index)):
            met[single.what] += single.verdict.startswith("met")

    def counted(t: Target) -> Target:
        if t.verdict == "-" or "RSS" in t.what:
            return t
        if t.verdict.startswith("met"):
            return t._replace(verdict=f"{t.verdict}, in {met[t.what]} of {count} rounds")
        return t._replace(verdict=f"{t.verdict}; met in {met[t.what]} of {count} rounds")

    return [counted(t) for t in out]


def _targets(report: Report) -> list[Target]:
    out: list[Target] = []

    def check(
        what: str,
        value: float,
        peer: float,
        limit: float,
        unit: str,
        floor: float,
        floor_name: str = "",
        higher_is_better: bool = False,
        digits: int = 0,
    ) -> None:
        def shown(v: float) -> str:
            if math.isnan(v):
                return "-"
            ratio = f" ({v / peer:.2f}x nginx)" if peer and not math.isnan(peer) else ""
            return f"{v:,.{digits}f} {unit}{ratio}"

        peer_text = "-" if math.isnan(peer) else f"{peer:,.{digits}f} {unit}"
        floor_text = shown(floor) + (
            f", {floor_name}" if floor_name and not math.isnan(floor) else ""
        )
        if math.isnan(value) or math.isnan(limit):
            measured = "not measured" if math.isnan(value) else f"{value:,.{digits}f} {unit}"
            out.append(Target(what, measured, "-", peer_text, floor_text))
            return
        verdict = _verdict(value, floor, limit, unit, higher_is_better, digits)
        measured = shown(value)
        if value < 0:  # the proxied path beat direct: the difference is below the noise
            measured, verdict = f"{measured} (below noise)", "met (noise dominates)"
        out.append(Target(what, measured, verdict, peer_text, floor_text))

    nginx = "nginx proxy"
    nginx_hop = _hop(report, nginx, _p50)
    nginx_cpu = _paced_cpu(report, nginx, "nginx-proxy")
    nginx_rps = report.wrk.get((nginx, 16), Cell()).median(_rps)
    nginx_pair = _paced_added_p90(report, "nginx pair")
    # Beside the floor's pair: two byte relays, about the least any pair on uvloop pays.
    relay_pair = _paced_added_p90(report, RELAY_FLOOR_PAIR)
    pair_floor = "two in a row" + (
        "" if math.isnan(relay_pair) else f"; two byte relays: {relay_pair:,.0f} µs"
    )
    for build, (sidecar, process, pair) in BUILDS.items():
        if build and (sidecar, 1) not in report.wrk:
            continue  # the compiled build is measured only with --compiled
        check(
            f"added p50 per hop, 1 conn{build}: <= 2.0x nginx's",
            _hop(report, sidecar, _p50),
            nginx_hop,
            2.0 * nginx_hop,
            "µs",
            _hop(report, HTTPTOOLS_FLOOR, _p50),
        )
        check(
            f"CPU per request at 1000 rps{build}: <= 1.3x nginx's",
            _paced_cpu(report, sidecar, process),
            nginx_cpu,
            1.3 * nginx_cpu,
            "ms/1000 req",
            _paced_cpu(report, HTTPTOOLS_FLOOR, "httptools-floor"),
        )
        check(
            f"throughput at 16 conns{build}: >= 0.8x nginx proxy's",
            report.wrk.get((sidecar, 16), Cell()).median(_rps),
            nginx_rps,
            0.8 * nginx_rps,
            "req/s",
            report.wrk.get((HTTPTOOLS_FLOOR, 16), Cell()).median(_rps),
            higher_is_better=True,
        )
        check(
            f"pair at 1000 rps, added p90{build}: <= 1.3x nginx pair's and < "
            f"{ISTIO_PAIR_P90_US:g} µs (Istio 1.20 pair)",
            _paced_added_p90(report, pair),
            nginx_pair,
            min(1.3 * nginx_pair, ISTIO_PAIR_P90_US),
            "µs",
            _paced_added_p90(report, HTTPTOOLS_FLOOR_PAIR),
            pair_floor,
        )
    nginx_rss = _worst_rss(report, NGINX)
    # The compiled build's processes too: the wheel that ships maps its native modules.
    for name, build in [(n, "") for n in SIDECARS] + [(n, COMPILED) for n in SIDECARS]:
        process = f"{name}-compiled" if build else name
        if process in report.peak_rss_mb:
            grpc = process in report.grpc_listeners
            floor_proc = "grpc-floor" if grpc else "httptools-floor"
            listener = " (gRPC listener)" if grpc else ""
            check(
                f"peak RSS of {name}{build}{listener}: <= {RSS_LIMIT_MB:g} MB",
                report.peak_rss_mb[process],
                nginx_rss,
                RSS_LIMIT_MB,
                "MiB",
                report.peak_rss_mb.get(floor_proc, math.nan),
                "empty grpc.aio server" if grpc else "",
                digits=1,
            )
    empty = _grpc_p50(report, "empty grpc.aio server")
    # The floor of the task itself: a grpc.aio handler that makes the upstream GET and nothing
    # else (no parsing, pipeline or breaker); the empty server where it was not measured.
    fetch = _grpc_p50(report, GRPC_FETCH)
    for build in ("", COMPILED):
        if build and ("sidecar Call" + build, 1) not in report.grpc:
            continue
        check(
            f"gRPC Call p50, 1 conn{build}: <= empty grpc.aio server + {GRPC_SLACK_US:g} µs",
            _grpc_p50(report, "sidecar Call" + build),
            math.nan,
            empty + GRPC_SLACK_US,
            "µs",
            empty if math.isnan(fetch) else fetch,
            "empty grpc.aio server" if math.isnan(fetch) else GRPC_FETCH,
        )
    return out


TARGET_HEADERS = [
    "target",
    "sidecar",
    "verdict",
    "nginx, same measure",
    "Python floor (minimal httptools proxy), same measure",
]


def _profile(p: Profile) -> list[str]:
    """The profile's two tables, with how to read them."""
    lines = [
        "",
        f"### Profile: sidecar outbound at 16 connections (py-spy, {p.samples:,} samples)",
        "",
        "Most samples on top of the stack (self time):",
        "",
    ]
    lines += _table(["function", "share"], [[f"`{f}`", f"{s:.1%}"] for f, s in p.self_top])
    lines += [
        "",
        "Reading it: py-spy samples Python frames, so the time of a C call is charged to the "
        "Python function that made it; `ServerConnection.write` and `UpstreamConnection.send`"
        " are mostly the `send()` system calls of `transport.write`, and `Runner.run` is the "
        "event loop's own C code (uvloop: epoll, reads).",
        "",
        "Sidecar functions with the most samples anywhere on the stack:",
        "",
    ]
    lines += _table(["function", "share"], [[f"`{f}`", f"{s:.1%}"] for f, s in p.inclusive_top])
    return lines


def busy_host(report: Report) -> str:
    """A warning above the verdicts of a run that shared the machine ('' on a quiet one)."""
    if report.other_cpus is None or report.other_cpus < BUSY_HOST_CPUS:
        return ""
    return (
        f"**A busy host:** other processes (the hypervisor's steal included) used "
        f"{report.other_cpus:.2f} CPUs on average during this run, at least "
        f"{BUSY_HOST_CPUS:.2f}. Their work evicts caches and delays wake-ups between our "
        "requests, so these verdicts say more about the host than about the code; rerun on "
        "a quiet machine before reading them."
    )


def render(report: Report) -> str:
    """The whole `## Sidecar` section as markdown."""
    lines = [
        SECTION,
        "",
        f"Rerun: `{RERUN}` (`--quick` for a smoke run; `--rounds`, `--seconds`)."
        " Upstream: nginx answering a 13-byte body. Every proxy keeps connections to it"
        " alive. Latency in µs; CPU is user+system time of the proxy processes from /proc (on-CPU"
        " nanoseconds from schedstat, split into user and system by the clock ticks).",
        "",
    ]
    lines += [f"- {key}: {value}" for key, value in report.environment.items()]
    lines += [f"- **Note:** {note}" for note in report.notes]
    lines += ["", "### Targets (issue 13: ratios against nginx in this run)", ""]
    busy = busy_host(report)
    if busy:
        lines += [busy, ""]
    lines += _table(TARGET_HEADERS, [list(t) for t in targets(report)])
    lines += ["", FLOOR_TEXT, "", ROUNDS_TEXT]
    lines += ["", "### Closed loop: wrk, 1 and 16 connections", ""]
    lines += closed_loop(report)
    lines += [
        "",
        "Added latency per hop = (path - direct) / hops. The pair's CPU column is "
        "client + server sidecar.",
        "",
    ]
    lines += ["### Fixed rate: 1000 requests/s, open loop", ""]
    lines += fixed_rate(report)
    lines += [
        "",
        "Python open-loop client (bench/sidecar/loadgen.py; wrk2 is not packaged): "
        "requests leave every millisecond over 32 keep-alive connections; latency from "
        "write to last byte, or from the scheduled time when a request waited for a "
        "connection. CPU ms per 1000 requests at 1000 rps = thousandths of a vCPU. User space"
        " is the process's own code (what callgrind counts); the rest is the kernel's, mostly"
        " loopback TCP send/receive and epoll, which every proxy here pays alike.",
        "",
    ]
    lines += ["### gRPC `Call` (grpcio aio client -> sidecar -> upstream)", ""]
    lines += grpc_table(report)
    lines += [
        "",
        "Latency includes the Python grpcio client itself (the same box, the same cores). "
        "The empty grpc.aio server (bench/sidecar/grpc_floor.py: same generated code, options "
        "and event loop; `Call` returns at once) is the floor of any Python gRPC listener: the "
        "sidecar's CPU per call above it is its own work (compare the HTTP path's CPU per "
        "request). The same server making a bare GET to the upstream before it answers (no "
        "parsing, no pipeline) is what the hop itself costs any gRPC-to-HTTP bridge.",
        "",
    ]
    lines += ["### Memory", ""]
    lines += _table(
        ["process", "peak RSS MiB", "PSS MiB (end)"],
        [
            [k, f"{v:.1f}", _n(report.pss_mb.get(k, math.nan), 1)]
            for k, v in report.peak_rss_mb.items()
        ],
    )
    lines += [
        "",
        "PSS counts a shared library page once per process sharing it: what each sidecar adds "
        "on a node running several. Sidecars with a gRPC listener load grpc (~20 MB): "
        + (", ".join(report.grpc_listeners) or "none")
        + ".",
    ]
    if report.import_rss_mb:
        lines += ["", "The floor: RSS of a fresh Python after the imports alone (no listener):", ""]
        lines += _table(
            ["imports", "RSS MiB"], [[k, f"{v:.1f}"] for k, v in report.import_rss_mb.items()]
        )
    missing = report.profile_error
    if report.profile is not None and report.profile.samples == 0 and not missing:
        missing = "py-spy recorded no sample"
    if missing:
        lines += [
            "",
            "### Profile: sidecar outbound at 16 connections (py-spy)",
            "",
            f"**The profile was not recorded: {missing}.**",
        ]
    elif report.profile is not None:
        lines += _profile(report.profile)
    if report.other_idle is not None:
        mode, other = report.other_idle
        lines += ["", f"### The same rounds with {mode}", ""]
        lines += _table(TARGET_HEADERS, [list(t) for t in targets(other) if "RSS" not in t.what])
        lines += [""]
        lines += closed_loop(other)
        lines += [""]
        lines += fixed_rate(other)
        lines += [""]
        lines += grpc_table(other)
    return "\n".join(lines) + "\n"


def write_section(doc: Path, section: str) -> None:
    """Replace the `## Sidecar` section of `doc` (up to the next `## ` heading), or append it."""
    if not doc.exists():
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(f"# Benchmarks\n\n{section}")
        return
    lines = doc.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == SECTION), None)
    if start is None:
        doc.write_text("".join(lines).rstrip("\n") + "\n\n" + section)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    doc.write_text("".join(lines[:start]) + section + ("\n" + tail if tail else ""))
