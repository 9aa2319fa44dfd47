"""`ccb demo`, `ccb demo workerpool` and `ccb fault`: the demo's command line."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import time
from collections.abc import Coroutine
from typing import Any

from cascadebreaker.demo.topology import EXTERNAL, Mode, Timings, Topology


def default_mode() -> Mode:
    """Sidecar mode when the sidecar is built, else in-process breakers, else direct calls."""
    if importlib.util.find_spec("cascadebreaker.sidecar.command") is not None:
        return Mode.SIDECAR
    try:
        from cascadebreaker import CircuitBreaker  # noqa: F401
    except ImportError:
        return Mode.DIRECT
    return Mode.PLAIN


def register(subparsers: Any) -> None:
    """Add `demo` (with `demo workerpool`) and `fault` to the `ccb` parser."""
    demo = subparsers.add_parser("demo", help="run the saga demo with a scripted fault story")
    demo.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default=None,
        help="direct | plain (in-process breakers) | sidecar (default: best built)",
    )
    demo.add_argument(
        "--keep-running",
        action="store_true",
        help="stay up after the story until Ctrl-C (use `ccb fault` meanwhile)",
    )
    demo.add_argument("--no-story", action="store_true", help="start the system, skip the story")
    demo.add_argument(
        "--dashboard",
        action="store_true",
        help="start `ccb dashboard` beside the shop and print its URL (with --keep-running, "
        "orders keep flowing at --rate so faults show in the browser)",
    )
    demo.add_argument(
        "--dashboard-port", type=int, default=0, help="the dashboard's port (default: a free one)"
    )
    demo.add_argument("--seconds", type=float, default=6.0, help="length of a story chapter")
    demo.add_argument("--rate", type=float, default=5.0, help="orders per second during the story")
    demo.add_argument(
        "--recovery-timeout", type=float, default=3.0, help="breakers' recovery timeout, seconds"
    )
    demo.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="replicas of shipping, each with its own sidecar (break one route with "
        "`ccb fault inject courier --mode down --caller shipping.2`)",
    )
    demo.set_defaults(handler=run_demo)
    demo_sub = demo.add_subparsers(dest="demo_command", metavar="SCENARIO")
    workerpool = demo_sub.add_parser(
        "workerpool", help="a bounded worker pool with a hanging upstream, with/without breaker"
    )
    from cascadebreaker.demo.workerpool_scenario import add_arguments

    add_arguments(workerpool)
    web = demo_sub.add_parser(
        "web", help="the settlement report page (Django + Inertia + Vue) with a guarded widget"
    )
    from cascadebreaker.demo.web.command import add_arguments as add_web_arguments

    add_web_arguments(web)

    experiment = subparsers.add_parser(
        "experiment", help="three modes x three faults + overhead: results.json, report, plots"
    )
    experiment.add_argument("--out", help="output directory")
    experiment.add_argument(
        "--check", metavar="RESULTS_JSON", help="only check a results.json for every field"
    )
    experiment.add_argument("--quick", action="store_true", help="short phases (CI)")
    experiment.add_argument(
        "--policy",
        choices=("consecutive", "failure_rate", "both"),
        default=None,
        help="the breakers' trip policy: consecutive failures, a failure rate, or both "
        "(every fault with consecutive, the intermittent one with a failure rate too); "
        "default both, consecutive with --quick",
    )
    experiment.add_argument("--faults", default=None, help="comma-separated subset of faults")
    experiment.add_argument("--modes", default=None, help="comma-separated: none,plain,cascade")
    experiment.add_argument("--no-overhead", action="store_true", help="skip the overhead part")
    experiment.add_argument(
        "--no-workerpool", action="store_true", help="skip the worker-pool scenario"
    )
    experiment.set_defaults(handler=run_experiment)

    fault = subparsers.add_parser("fault", help="switch faults of a running `ccb demo`")
    fault_sub = fault.add_subparsers(dest="fault_command", metavar="ACTION", required=True)
    inject = fault_sub.add_parser("inject", help="inject a fault into an external upstream")
    inject.add_argument("service", choices=sorted(EXTERNAL))
    inject.add_argument("--mode", required=True, metavar="down|slow[=DELAY]|errors[=RATE]")
    inject.add_argument("--rate", type=float, default=None, help="share of requests affected")
    inject.add_argument("--delay", type=float, default=None, help="seconds, for slow")
    inject.add_argument(
        "--caller", default=None, help="only calls from this replica (e.g. shipping.2)"
    )
    inject.set_defaults(handler=run_fault_inject)
    clear = fault_sub.add_parser("clear", help="clear the fault of one upstream (default: all)")
    clear.add_argument("service", nargs="?", choices=sorted(EXTERNAL))
    clear.set_defaults(handler=run_fault_clear)


def run_demo(args: argparse.Namespace) -> int:
    """Start the demo, run the story in a live view, and stop everything cleanly."""
    from rich.console import Console
    from rich.live import Live

    from cascadebreaker.demo.control import (
        DemoAlreadyRunning,
        claim_state,
        remove_state,
        write_state,
    )
    from cascadebreaker.demo.launcher import DemoSystem, LaunchError, sigterm_as_interrupt
    from cascadebreaker.demo.story import StoryState, run_story, watch
    from cascadebreaker.demo.view import addresses, render, summary_lines

    console = Console()
    if args.seconds <= 0 or args.rate <= 0 or args.recovery_timeout <= 0:
        print("ccb demo: --seconds, --rate and --recovery-timeout must be > 0", file=sys.stderr)
        return 2
    if not 1 <= args.replicas <= 16:
        print("ccb demo: --replicas must be between 1 and 16", file=sys.stderr)
        return 2
    try:
        claim_state()
    except DemoAlreadyRunning as exc:
        print(f"ccb demo: {exc}", file=sys.stderr)
        return 1
    mode = Mode(args.mode) if args.mode else default_mode()
    timings = Timings(call_timeout=2.0, failure_threshold=5, recovery_timeout=args.recovery_timeout)
    replicas = {"shipping": args.replicas} if args.replicas > 1 else None
    system = DemoSystem.create(mode, timings, replicas=replicas)
    sigterm_as_interrupt()
    try:
        with console.status(f"starting {len(system.topology.services)} services ({mode.value})"):
            system.start()
        path = write_state(system.topology, system.pids(), system.workdir)
        dashboard_url = None
        if args.dashboard:
            from cascadebreaker.demo.dashboard import start_dashboard

            with console.status("starting the dashboard"):
                dashboard_url = start_dashboard(system, args.dashboard_port)
            write_state(system.topology, system.pids(), system.workdir)
        console.print(addresses(system.topology))
        console.print(
            f"public entry: POST {system.topology.public_url}/orders   "
            f"state file: {path}   logs: {system.workdir}"
        )
        if dashboard_url is not None:
            print(f"dashboard: {dashboard_url}", flush=True)  # one line, never wrapped
        if not args.no_story:
            state = StoryState(system.topology)
            with Live(render(state), console=console, refresh_per_second=4) as live:
                asyncio.run(
                    run_story(
                        system.topology,
                        state,
                        seconds=args.seconds,
                        rate=args.rate,
                        refresh=lambda: live.update(render(state)),
                    )
                )
            for line in summary_lines(state):
                console.print(line, highlight=False)
        if args.keep_running:
            console.print(
                "running; `ccb fault inject courier --mode down`, `ccb fault clear`; Ctrl-C to stop"
            )
            load_rate = args.rate if args.dashboard else None
            if not console.is_terminal:
                asyncio.run(_keep_running(system.topology, load_rate, None))
            state = StoryState(system.topology)
            with Live(render(state), console=console, refresh_per_second=2) as live:
                view = watch(system.topology, state, lambda: live.update(render(state)))
                asyncio.run(_keep_running(system.topology, load_rate, view))
    except LaunchError as exc:
        console.print(f"[red]demo failed to start:[/red] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print("stopping…")
    finally:
        remove_state()
        system.stop()
    return 0


async def _keep_running(
    topology: Topology, load_rate: float | None, view: Coroutine[Any, Any, None] | None
) -> None:
    """Until cancelled: the live view (when shown) and steady orders (when a rate is given)."""
    from cascadebreaker.demo.story import steady_load

    parts: list[Coroutine[Any, Any, object]] = [view or asyncio.Event().wait()]
    if load_rate is not None:
        parts.append(steady_load(topology, load_rate))
    await asyncio.gather(*parts)


def run_experiment(args: argparse.Namespace) -> int:
    """`ccb experiment`: every (fault, mode) case, then the overhead runs; write the outputs."""
    import datetime
    import platform
    from dataclasses import asdict
    from pathlib import Path

    from cascadebreaker.demo.experiment import (
        FAULTS,
        ExperimentSettings,
        available_modes,
        plan_cases,
        run_faults,
    )
    from cascadebreaker.demo.launcher import sigterm_as_interrupt
    from cascadebreaker.demo.overhead import run_overhead
    from cascadebreaker.demo.progress import ExperimentProgress
    from cascadebreaker.demo.report import write_outputs

    if args.check:
        return check_results(args.check)
    if not args.out:
        print("ccb experiment: --out DIR is required", file=sys.stderr)
        return 2
    settings = ExperimentSettings.quick() if args.quick else ExperimentSettings()
    # `--faults ""` runs no fault case (only the overhead and worker-pool parts).
    faults = list(FAULTS) if args.faults is None else [f for f in args.faults.split(",") if f]
    modes = args.modes.split(",") if args.modes else available_modes()
    unknown = [f for f in faults if f not in FAULTS] + [
        m for m in modes if m not in ("none", "plain", "cascade")
    ]
    if unknown:
        print(f"ccb experiment: unknown fault/mode: {', '.join(unknown)}", file=sys.stderr)
        return 2
    policy = args.policy or ("consecutive" if args.quick else "both")
    if policy == "failure_rate":
        cases = plan_cases([], modes, faults)
    else:
        cases = plan_cases(faults, modes, ["intermittent"] if policy == "both" else [])
        cases = [c for c in cases if c.policy == "consecutive" or c.fault in faults]
    sigterm_as_interrupt()
    steps = len(cases) + (not args.no_overhead) + (not args.no_workerpool)
    progress = ExperimentProgress(steps, case_seconds(settings))

    started = time.monotonic()
    results: dict[str, Any] = {
        "meta": {
            "quick": args.quick,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "settings": asdict(settings),
            "policy": policy,
        },
    }
    with progress:
        results["faults"] = run_faults(settings, cases, progress.case)
        if not args.no_overhead:
            rates = [5.0, 15.0] if args.quick else [5.0, 10.0, 20.0, 40.0]
            seconds = 6.0 if args.quick else 20.0
            progress.step("overhead: direct and sidecar", len(rates) * 2 * (seconds + 5))
            results["overhead"] = run_overhead(rates, seconds, progress.note)
        if not args.no_workerpool:
            progress.step("worker pool: without and with a breaker", 40.0)
            results["workerpool"] = run_workerpool(args.quick)
    results["meta"]["duration_s"] = round(time.monotonic() - started, 1)
    out = Path(args.out)
    write_outputs(results, out)
    print(f"wrote {out / 'results.json'}, {out / 'report.md'} and {len(results['plots'])} plots")
    return 0


def case_seconds(settings: Any) -> float:
    """About how long one fault case takes (its phases and starting the system)."""
    return float(settings.healthy_s + settings.fault_s + settings.recovered_s + 5.0)


def check_results(path: str) -> int:
    """`ccb experiment --check results.json`: exit 1 and list what is missing or wrong."""
    import json

    from cascadebreaker.demo.report import problems

    try:
        with open(path) as f:
            found = problems(json.load(f))
    except (OSError, ValueError) as exc:
        print(f"ccb experiment: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    for problem in found:
        print(problem)
    print(f"{path}: {'complete' if not found else f'{len(found)} problems'}")
    return 1 if found else 0


def run_workerpool(quick: bool) -> dict[str, Any]:
    """The worker-pool scenario as an experiment section: settings, rows, /other failures."""
    import shutil
    import tempfile
    from dataclasses import asdict, replace
    from pathlib import Path

    from cascadebreaker.demo.workerpool_scenario import (
        ScenarioSettings,
        report_rows,
        run_scenario,
    )

    settings = ScenarioSettings()
    settings = replace(settings, warmup=4.0, measure=4.0) if quick else settings
    workdir = Path(tempfile.mkdtemp(prefix="ccb-workerpool-"))
    try:
        without, with_breaker = asyncio.run(run_scenario(settings, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "settings": asdict(settings),
        "rows": report_rows([without, with_breaker]),
        "other_failures": {
            "no_breaker": without.other_failures,
            "breaker": with_breaker.other_failures,
        },
    }


def run_fault_inject(args: argparse.Namespace) -> int:
    """`ccb fault inject SERVICE --mode ...` against the running demo."""
    from cascadebreaker.demo.control import DemoNotRunning, inject_fault, parse_fault, read_state

    try:
        body = parse_fault(args.mode)
        if args.rate is not None:
            body["rate"] = args.rate
        if args.delay is not None:
            body["delay"] = args.delay
        if args.caller is not None:
            body["caller"] = args.caller
        state = read_state()
        result = inject_fault(state.topology, args.service, body)
    except (ValueError, DemoNotRunning) as exc:
        print(f"ccb fault: {exc}", file=sys.stderr)
        return 2
    print(f"{args.service}: {result['fault']}")
    return 0


def run_fault_clear(args: argparse.Namespace) -> int:
    """`ccb fault clear [SERVICE]` against the running demo."""
    from cascadebreaker.demo.control import DemoNotRunning, clear_faults, read_state

    try:
        cleared = clear_faults(read_state().topology, args.service)
    except (ValueError, DemoNotRunning) as exc:
        print(f"ccb fault: {exc}", file=sys.stderr)
        return 2
    print(f"cleared: {', '.join(cleared)}")
    return 0
