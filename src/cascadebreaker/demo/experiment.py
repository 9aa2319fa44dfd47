"""`ccb experiment`: the same load in three modes under four faults, measured the same way.

For each (fault, mode): a fresh demo system, steady load, a healthy phase, the fault, the fault
cleared; counters of every service are read at the end. The numbers land in `results.json`
shaped `{"faults": {fault: {mode: {...}}}, "overhead": {...}}`. A fault run with the breakers'
failure-rate policy (`--policy`) is keyed `<fault>@failure_rate`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import httpx

from cascadebreaker.demo.control import fault_url
from cascadebreaker.demo.launcher import DemoSystem
from cascadebreaker.demo.load import LoadReport, percentile, run_load
from cascadebreaker.demo.observe import ServiceView, observe, reset_stats, total
from cascadebreaker.demo.report import FAULT_NAMES
from cascadebreaker.demo.topology import Mode, Timings

# Experiment mode name -> how the demo runs it.
MODES: dict[str, Mode] = {"none": Mode.DIRECT, "plain": Mode.PLAIN, "cascade": Mode.SIDECAR}
FAULTS = FAULT_NAMES  # one list: what the experiment runs is what --check expects
# Faults run with replicas: one shipping replica of three losing its route to the courier (the
# cascade must refuse no order another replica can serve), and the courier down for all three
# (the cascade must still refuse at the entry).
FAULT_REPLICAS: dict[str, dict[str, int]] = {
    "replica_route": {"shipping": 3},
    "replicas_courier_down": {"shipping": 3},
}
SICK_REPLICA = "shipping.3"  # whose route to the courier `replica_route` breaks
# Faults on a dependency every order survives (the order service falls back): every refused
# order is a false refusal, and no order should fail.
SOFT_FAULTS = frozenset({"soft_down"})

# Remote calls a successful order causes, counted where they arrive: order, inventory,
# payment, shipping, payment-gateway, courier, recommendations (one request each).
CALLS_PER_OK_ORDER = 7
# Consecutive successful orders that count as "recovered".
RECOVERED_RUN = 5


@dataclass(frozen=True)
class ExperimentSettings:
    """Phase lengths, load and breaker timings of every case."""

    rate: float = 10.0  # orders/s: the sidecar-mode system saturates near 25/s on 2 cores
    healthy_s: float = 10.0
    fault_s: float = 30.0
    recovered_s: float = 20.0
    timings: Timings = field(
        default_factory=lambda: Timings(call_timeout=1.0, failure_threshold=5, recovery_timeout=5.0)
    )

    @classmethod
    def quick(cls) -> ExperimentSettings:
        """Short phases for CI: a few minutes for all nine cases."""
        return cls(
            rate=10.0,
            healthy_s=3.0,
            fault_s=8.0,
            recovered_s=6.0,
            timings=Timings(call_timeout=0.5, failure_threshold=3, recovery_timeout=1.5),
        )


def fault_body(fault: str, timings: Timings) -> tuple[str, dict[str, Any]]:
    """The upstream and the `/_fault` body of a named fault."""
    if fault in ("courier_down", "replicas_courier_down"):
        return "courier", {"mode": "down"}
    if fault == "replica_route":
        return "courier", {"mode": "down", "caller": SICK_REPLICA}
    if fault == "gateway_slow":
        # Slower than the payment hop's timeout: every charge times out.
        return "payment-gateway", {"mode": "slow", "delay": timings.call_timeout * 3}
    if fault == "intermittent":
        return "courier", {"mode": "errors", "rate": 0.5}
    if fault == "soft_down":
        return "recommendations", {"mode": "down"}
    raise ValueError(f"unknown fault {fault!r}; expected one of {', '.join(FAULTS)}")


@dataclass
class CaseTimeline:
    """When the fault started and ended, in seconds since the load began."""

    fault_at: float = 0.0
    cleared_at: float = 0.0


async def run_case(system: DemoSystem, fault: str, settings: ExperimentSettings) -> dict[str, Any]:
    """One fault against one running system: healthy → fault → cleared, under steady load."""
    topology = system.topology
    upstream, body = fault_body(fault, settings.timings)
    timeline = CaseTimeline()
    stop = asyncio.Event()
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as client:
        await reset_stats(topology, client)
        started = time.monotonic()
        load = asyncio.create_task(
            run_load(
                topology.public_url,
                rate=settings.rate,
                stop=stop,
                request_timeout=topology.call_timeout("gateway") * 2,
            )
        )
        try:
            await asyncio.sleep(settings.healthy_s)
            timeline.fault_at = time.monotonic() - started
            (await client.post(fault_url(topology, upstream), json=body)).raise_for_status()
            await asyncio.sleep(settings.fault_s)
            timeline.cleared_at = time.monotonic() - started
            (await client.delete(fault_url(topology, upstream))).raise_for_status()
            await asyncio.sleep(settings.recovered_s)
        finally:
            stop.set()
            report = await load
        views = await observe(topology, client)
    return case_metrics(report, views, timeline, soft=fault in SOFT_FAULTS)


def case_metrics(
    report: LoadReport,
    views: dict[str, ServiceView],
    timeline: CaseTimeline,
    soft: bool = False,
) -> dict[str, Any]:
    """The numbers of one case, from the orders' outcomes and the services' counters."""
    results = report.results
    ok = sum(1 for r in results if r.outcome == "ok")
    failed = len(results) - ok
    arrived = sum(total(views, name, "requests") for name in views if name != "gateway")
    compensations = total(views, "order", "compensations")
    # Healthy = finished before the fault: an order in flight at that moment may rightly fail.
    healthy = report.finished_before(timeline.fault_at)
    after_fault = [r for r in results if r.started >= timeline.fault_at]
    first_refusal = next((r.started for r in after_fault if r.outcome == "refused"), None)
    failed_ms = report.latencies_ms("failed", "refused", "error")
    ok_ms = report.latencies_ms("ok")
    return {
        "orders": len(results),
        "ok_orders": ok,
        "failed_orders": failed,
        **{f"outcome_{k}": v for k, v in report.counts().items()},
        "compensations": compensations,
        "compensations_per_failed_order": _ratio(compensations, failed),
        "compensation_failures": total(views, "order", "compensation_failures"),
        "remote_calls_per_failed_order": _ratio(arrived - CALLS_PER_OK_ORDER * ok, failed),
        "wasted_reservations": total(views, "inventory", "reservations_made") - ok,
        "wasted_charges": total(views, "payment", "charges") - ok,
        "early_refusals_while_healthy": healthy.counts()["refused"],
        # Refusals a run with no fault on that dependency would not make: before the fault;
        # and for a fault on a dependency orders survive (`soft_down`), every one of them.
        "false_refusals": report.counts()["refused"] if soft else healthy.counts()["refused"],
        "time_to_first_early_refusal_s": (
            None if first_refusal is None else round(first_refusal - timeline.fault_at, 3)
        ),
        "recovery_s": _recovery(report, timeline.cleared_at),
        **{f"p{q}_ms_failed": _round(percentile(failed_ms, q)) for q in (50, 95, 99)},
        **{f"p{q}_ms_ok": _round(percentile(ok_ms, q)) for q in (50, 95, 99)},
        "phases": {
            "healthy": healthy.counts(),
            "fault": report.between(timeline.fault_at, timeline.cleared_at).counts(),
            "recovered": report.between(timeline.cleared_at, float("inf")).counts(),
        },
        "fault_at_s": round(timeline.fault_at, 3),
        "cleared_at_s": round(timeline.cleared_at, 3),
    }


def _recovery(report: LoadReport, cleared_at: float) -> float | None:
    """Seconds from clearing the fault to the first of RECOVERED_RUN consecutive ok orders."""
    after = [r for r in report.results if r.started >= cleared_at]
    for i in range(len(after) - RECOVERED_RUN + 1):
        if all(r.outcome == "ok" for r in after[i : i + RECOVERED_RUN]):
            return round(after[i].started - cleared_at, 3)
    return None


def _ratio(numerator: float, denominator: float) -> float | None:
    return None if denominator == 0 else round(numerator / denominator, 3)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def available_modes() -> list[str]:
    """Experiment modes this installation can run (cascade needs the sidecar)."""
    import importlib.util

    modes = ["none", "plain"]
    if importlib.util.find_spec("cascadebreaker.sidecar.command") is not None:
        modes.append("cascade")
    return modes


@dataclass(frozen=True)
class Case:
    """One (fault, mode) run; `policy` is the breakers' (the key gets a suffix when not the
    default)."""

    fault: str
    mode: str
    policy: str = "consecutive"

    @property
    def key(self) -> str:
        """The fault's key in results.json."""
        return self.fault if self.policy == "consecutive" else f"{self.fault}@{self.policy}"


def plan_cases(
    faults: Sequence[str], modes: Sequence[str], failure_rate_faults: Sequence[str] = ()
) -> list[Case]:
    """Every case to run: each fault in each mode, then the failure-rate ones (modes with
    breakers only)."""
    # The replica faults compare the cascade with plain breakers only.
    cases = [
        Case(fault, mode)
        for mode in modes
        for fault in faults
        if not (fault in FAULT_REPLICAS and mode == "none")
    ]
    breaker_modes = [m for m in modes if m != "none"]
    cases += [Case(f, m, "failure_rate") for m in breaker_modes for f in failure_rate_faults]
    return cases


def run_faults(
    settings: ExperimentSettings,
    cases: list[Case],
    progress: Callable[[Case, int], None] = lambda _case, _i: None,
) -> dict[str, dict[str, Any]]:
    """Every case, each on a fresh system; `{fault key: {mode: metrics}}`."""
    results: dict[str, dict[str, Any]] = {}
    for index, case in enumerate(cases):
        progress(case, index)
        timings = replace(settings.timings, policy=case.policy)
        replicas = FAULT_REPLICAS.get(case.fault)
        with DemoSystem.create(MODES[case.mode], timings, replicas=replicas) as system:
            metrics = asyncio.run(run_case(system, case.fault, settings))
        results.setdefault(case.key, {})[case.mode] = metrics
    return results


def settings_json(settings: ExperimentSettings) -> dict[str, Any]:
    """The settings as recorded in results.json."""
    return asdict(settings)
