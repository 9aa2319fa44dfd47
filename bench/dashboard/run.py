"""Dashboard benchmark: its cost on a sidecar, and how fast a breaker's change reaches a page.

    .venv/bin/python -m bench dashboard          # 30 trips per mode, 60 s quiet windows; docs
    .venv/bin/python -m bench dashboard --quick  # 6 trips, 15 s windows; prints only

Three rows, measured in one run on one sidecar (`measure.py` says how): no dashboard; `ccb
dashboard` as shipped (one Watch stream, /status every 5 s and never within 2 s); and the peer
design, a poll-only dashboard reading /status every second (`--poll-only --interval 1`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
from pathlib import Path
from statistics import median, quantiles

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.cascade.run import write_section
from bench.dashboard import measure
from bench.dashboard.setup import start_dashboard, start_shop

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
SECTION = "## Dashboard"
MODES = {
    "ccb dashboard (Watch + /status every 5 s, ≥ 2 s apart)": (),
    "poll only, /status every 1 s": ("--poll-only", "--interval", "1", "--min-gap", "1"),
}


def _ms(values: list[float], q: int) -> str:
    if not values:
        return "-"
    if len(values) < 2:
        return f"{values[0] * 1000:.0f}"
    return f"{quantiles(values, n=100, method='inclusive')[q - 1] * 1000:.0f}"


def table(results: dict[str, measure.ModeResult]) -> list[str]:
    """Markdown rows, one per mode."""
    rows = [
        "| mode | Watch streams on the sidecar | /status per min, quiet | /status per min, "
        "changing | sidecar CPU, quiet, ms per min | change → page p50 ms | p90 ms | max ms "
        "| lost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in results.items():
        shown = r.latencies
        rows.append(
            f"| {mode} | {r.subscribers} | {r.status_per_min_quiet:.1f} | "
            f"{r.status_per_min_busy:.1f} | {r.cpu_ms_per_min:.1f} | "
            f"{f'{median(shown) * 1000:.0f}' if shown else '-'} | {_ms(shown, 90)} | "
            f"{f'{max(shown) * 1000:.0f}' if shown else '-'} | {r.lost} |"
        )
    return rows


Results = dict[str, measure.ModeResult]


async def run(args: argparse.Namespace, workdir: Path) -> tuple[Results, float]:
    """Every mode against one fresh sidecar."""
    results: dict[str, measure.ModeResult] = {}
    shop = start_shop(workdir)
    try:
        baseline = measure.ModeResult()
        await measure.quiet_window(shop, None, args.window, baseline)
        results["no dashboard"] = baseline
        for i, (mode, options) in enumerate(MODES.items()):
            dashboard = start_dashboard(workdir, f"dashboard-{i}", shop.admin_url, *options)
            url = f"http://127.0.0.1:{dashboard.port}"
            try:
                result = measure.ModeResult()
                await measure.trips(shop, url, args.trips, result)
                await measure.quiet_window(shop, url, args.window, result)
                results[mode] = result
            finally:
                dashboard.stop()
        per_status = await measure.cpu_per_status(shop, 500)
    finally:
        shop.stop()
    return results, per_status


def render(
    results: dict[str, measure.ModeResult], per_status: float, args: argparse.Namespace
) -> str:
    """The `## Dashboard` section."""
    return "\n".join(
        [
            SECTION,
            "",
            f"`python -m bench dashboard` on {platform.node() or 'this host'}: "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}, loopback, one sidecar "
            f"(`shop`, one upstream, signed updates). {args.trips} trips per dashboard mode; "
            f"quiet windows of {args.window:g} s with no traffic. Load average "
            f"{args.load_before:.1f} before and {os.getloadavg()[0]:.1f} after the run.",
            "",
            "*Change → page*: from the bench sending the call that opens the sidecar's breaker "
            "to an SSE client of the dashboard (standing in for the browser) receiving a picture "
            "that shows it OPEN. *Changing*: /status rate while the breaker opens and closes "
            "about once a second.",
            "",
            *table(results),
            "",
            f"The sidecar spends {per_status:.0f} µs of CPU per /status answer (500 "
            "back-to-back requests), so the shipped dashboard's polling costs it about "
            f"{per_status * 12 / 1000:.1f} ms of CPU a minute when quiet and at most "
            f"{per_status * 30 / 1000:.1f} ms a minute while things change (one /status per "
            "2 s); its Watch stream costs one queue entry per update.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, write docs/benchmarks.md unless --quick / --no-doc."""
    parser = argparse.ArgumentParser(prog="python -m bench dashboard")
    parser.add_argument("--quick", action="store_true", help="short run, print only")
    parser.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    parser.add_argument("--trips", type=int, default=None)
    parser.add_argument("--window", type=float, default=None, help="quiet window, seconds")
    args, _ = parser.parse_known_args(argv)
    args.trips = args.trips or (6 if args.quick else 30)
    args.window = args.window or (15.0 if args.quick else 60.0)
    args.load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ccb-bench-dashboard-") as tmp:
        results, per_status = asyncio.run(run(args, Path(tmp)))
    section = render(results, per_status, args)
    print(section)
    if not (args.quick or args.no_doc):
        write_section(DOC, section)
        print(f"wrote {SECTION} to {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
