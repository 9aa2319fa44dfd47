"""The experiment's outputs: results.json, a markdown report and PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Rows of the per-fault tables, in reading order.
CASE_ROWS = (
    "orders",
    "failed_orders",
    "outcome_failed",
    "outcome_refused",
    "outcome_error",
    "compensations",
    "compensations_per_failed_order",
    "remote_calls_per_failed_order",
    "wasted_reservations",
    "wasted_charges",
    "p50_ms_failed",
    "p95_ms_failed",
    "p99_ms_failed",
    "p50_ms_ok",
    "p95_ms_ok",
    "p99_ms_ok",
    "time_to_first_early_refusal_s",
    "early_refusals_while_healthy",
    "false_refusals",
    "recovery_s",
)


# Fields every (fault, mode) case must report, and the fault and mode names.
REQUIRED_CASE_FIELDS = (
    "orders",
    "failed_orders",
    "compensations",
    "remote_calls_per_failed_order",
    "early_refusals_while_healthy",
    "p95_ms_failed",
    "recovery_s",
    "wasted_reservations",
    "wasted_charges",
    "time_to_first_early_refusal_s",
    "false_refusals",
)
FAULT_NAMES = (
    "courier_down",
    "gateway_slow",
    "intermittent",
    "soft_down",
    "replica_route",
    "replicas_courier_down",
)
MODE_NAMES = ("none", "plain", "cascade")
# Faults with three shipping replicas: they compare the cascade with plain breakers only.
REPLICA_FAULTS = ("replica_route", "replicas_courier_down")
REPLICA_MODES = ("plain", "cascade")
# With three replicas and the courier down, the cascade still refuses at the entry: its
# compensations are at most this share of plain breakers'. A quick run's fault lasts 8 s, so
# the fixed cost of tripping each replica's breaker in turn (3 x threshold failed calls)
# weighs five times more there: the quick bound is looser.
MAX_COMPENSATION_SHARE = 0.05
MAX_COMPENSATION_SHARE_QUICK = 0.25


def problems(results: dict[str, Any]) -> list[str]:
    """What a results.json lacks or gets wrong (empty when it is complete and consistent)."""
    found: list[str] = []
    faults = results.get("faults")
    if not isinstance(faults, dict):
        return ["no 'faults' section"]
    for fault in FAULT_NAMES:
        by_mode = faults.get(fault)
        if not isinstance(by_mode, dict):
            found.append(f"faults.{fault} missing")
            continue
        for mode in REPLICA_MODES if fault in REPLICA_FAULTS else MODE_NAMES:
            case = by_mode.get(mode)
            if not isinstance(case, dict):
                found.append(f"faults.{fault}.{mode} missing")
                continue
            found += [
                f"faults.{fault}.{mode}.{k} missing" for k in REQUIRED_CASE_FIELDS if k not in case
            ]
            if case.get("early_refusals_while_healthy"):
                found.append(f"faults.{fault}.{mode}: early refusals while healthy")
            if case.get("false_refusals"):
                found.append(f"faults.{fault}.{mode}: {case['false_refusals']} false refusals")
    quick = bool(results.get("meta", {}).get("quick"))
    share = MAX_COMPENSATION_SHARE_QUICK if quick else MAX_COMPENSATION_SHARE
    found += _replica_claims(faults, share)
    found += _soft_down_problems(faults.get("soft_down"))
    found += _courier_down_problems(faults.get("courier_down"), share)
    for key, by_mode in faults.items():  # runs with another policy (`<fault>@failure_rate`)
        if "@" in key and isinstance(by_mode, dict):
            found += [
                f"faults.{key}.{mode}.{k} missing"
                for mode, case in by_mode.items()
                for k in REQUIRED_CASE_FIELDS
                if isinstance(case, dict) and k not in case
            ]
    overhead = results.get("overhead")
    if not isinstance(overhead, dict) or not overhead.get("added"):
        found.append("overhead section missing (needs direct and sidecar runs)")
    return found


def _replica_claims(faults: dict[str, Any], share: float) -> list[str]:
    """What the cascade promises with replicas (checked when both modes ran)."""
    found: list[str] = []
    cascade = faults.get("replica_route", {}).get("cascade")
    if isinstance(cascade, dict) and cascade.get("outcome_refused", 0):
        found.append(
            f"faults.replica_route.cascade: {cascade['outcome_refused']} orders refused at "
            "the entry although two shipping replicas could serve them"
        )
    outage = faults.get("replicas_courier_down", {})
    cascade, plain = outage.get("cascade"), outage.get("plain")
    if isinstance(cascade, dict) and isinstance(plain, dict):
        allowed = share * (plain.get("compensations") or 0)
        if (cascade.get("compensations") or 0) > allowed:
            found.append(
                f"faults.replicas_courier_down.cascade: {cascade.get('compensations')} "
                f"compensations, more than {share:.0%} of plain's "
                f"{plain.get('compensations')}"
            )
        if cascade.get("time_to_first_early_refusal_s") is None:
            found.append("faults.replicas_courier_down.cascade: never refused at the entry")
    return found


def _soft_down_problems(by_mode: Any) -> list[str]:
    """Orders survive the soft dependency: in no mode does a saga fail or an order get refused.

    An order the load client gave up on (`outcome_error`: no answer within its timeout, on a
    loaded machine) is reported in the table, not judged here: it says nothing about the soft
    dependency."""
    if not isinstance(by_mode, dict):
        return []
    found = []
    for mode, case in by_mode.items():
        if not isinstance(case, dict):
            continue
        if case.get("outcome_failed"):
            found.append(f"faults.soft_down.{mode}: {case['outcome_failed']} failed sagas")
        if case.get("outcome_refused"):
            found.append(f"faults.soft_down.{mode}: {case['outcome_refused']} refused orders")
    return found


def _courier_down_problems(by_mode: Any, share: float) -> list[str]:
    """The cascade refuses at the entry: its compensations stay a small share of plain's."""
    if not isinstance(by_mode, dict):
        return []
    plain, cascade = by_mode.get("plain"), by_mode.get("cascade")
    if not isinstance(plain, dict) or not isinstance(cascade, dict):
        return []
    ceiling = share * (plain.get("compensations") or 0)
    if (cascade.get("compensations") or 0) > max(ceiling, 1):
        return [
            f"faults.courier_down.cascade: {cascade.get('compensations')} compensations, more "
            f"than {share:.0%} of plain's {plain.get('compensations')}"
        ]
    return []


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def markdown(results: dict[str, Any]) -> str:
    """The report: one table per fault (metrics by modes) and the overhead table."""
    lines = ["# cascadebreaker experiment", ""]
    meta = results.get("meta", {})
    if meta:
        lines += [f"- {key}: `{json.dumps(value)}`" for key, value in meta.items()] + [""]
    for fault, by_mode in results.get("faults", {}).items():
        modes = list(by_mode)
        lines += [
            f"## {fault}",
            "",
            "| metric | " + " | ".join(modes) + " |",
            "|---|" + "---:|" * len(modes),
        ]
        for row in CASE_ROWS:
            lines.append(
                f"| {row} | " + " | ".join(_cell(by_mode[m].get(row)) for m in modes) + " |"
            )
        lines.append("")
    overhead = results.get("overhead")
    if overhead:
        lines += [
            "## overhead (healthy load)",
            "",
            "| mode | rate/s | orders | cpu % | rss MB | mean ms | p95 ms | p99 ms |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for mode, runs in overhead.get("runs", {}).items():
            for run in runs:
                lines.append(
                    f"| {mode} | {_cell(run['rate'])} | {run['orders']} | "
                    f"{_cell(run['cpu_percent'])} | {_cell(run['rss_mb'])} | "
                    f"{_cell(run['mean_ms'])} | {_cell(run['p95_ms'])} | "
                    f"{_cell(run['p99_ms'])} |"
                )
        if overhead.get("added"):
            lines += [
                "",
                "Added by the sidecars (sidecar minus direct):",
                "",
                "| rate/s | mean ms | p95 ms | cpu points | cpu % rel | rss MB | rss % rel |",
                "|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for a in overhead["added"]:
                lines.append(
                    f"| {_cell(a['rate'])} | {_cell(a['mean_ms'])} | "
                    f"{_cell(a['p95_ms'])} | {_cell(a['cpu_percent_points'])} | "
                    f"{_cell(a['cpu_relative_pct'])} | {_cell(a['rss_mb'])} | "
                    f"{_cell(a['rss_relative_pct'])} |"
                )
        lines.append("")
    workerpool = results.get("workerpool")
    if workerpool:
        wp = workerpool["settings"]
        lines += [
            "## worker pool",
            "",
            f"{wp['workers']} sync workers; `/slow-route` calls an upstream that never "
            f"answers ({wp['upstream_timeout']} s timeout, {wp['slow_clients']} callers); "
            f"`/other` does not ({wp['other_clients']} callers, {wp['other_timeout']} s "
            f"client timeout). Measured {wp['measure']} s after a {wp['warmup']} s warm-up.",
            "",
            "| variant | route | requests | ok | timeouts | errors | rejected | p50 ms | p99 ms |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in workerpool["rows"]:
            lines.append(
                f"| {row['variant']} | {row['route']} | {row['requests']} | "
                f"{row['ok']} | {row['timeouts']} | {row['errors']} | "
                f"{row['rejected']} | {_cell(row['p50_ms'])} | {_cell(row['p99_ms'])} |"
            )
        lines.append("")
    plots = results.get("plots", [])
    if plots:
        lines += ["## plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def plot(results: dict[str, Any], out: Path) -> list[str]:
    """PNG plots next to the report; returns their file names (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return []
    names: list[str] = []
    faults = results.get("faults", {})
    for metric, title in (
        ("compensations_per_failed_order", "compensations per failed order"),
        ("remote_calls_per_failed_order", "remote calls per failed order"),
        ("p95_ms_failed", "p95 latency of failed orders (ms)"),
    ):
        if not faults:
            break
        modes = sorted(
            {m for by_mode in faults.values() for m in by_mode},
            key=["none", "plain", "cascade"].index,
        )
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / max(1, len(modes))
        for i, mode in enumerate(modes):
            values = [faults[f].get(mode, {}).get(metric) or 0 for f in faults]
            ax.bar([x + i * width for x in range(len(faults))], values, width, label=mode)
        ax.set_xticks([x + width * (len(modes) - 1) / 2 for x in range(len(faults))], list(faults))
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        name = f"{metric}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)
    overhead = results.get("overhead")
    if overhead and overhead.get("runs"):
        fig, (cpu, lat) = plt.subplots(1, 2, figsize=(10, 4))
        for mode, runs in overhead["runs"].items():
            rates = [r["rate"] for r in runs]
            cpu.plot(rates, [r["cpu_percent"] for r in runs], marker="o", label=mode)
            lat.plot(rates, [r["mean_ms"] or 0 for r in runs], marker="o", label=f"{mode} mean")
            lat.plot(
                rates,
                [r["p95_ms"] or 0 for r in runs],
                marker="x",
                linestyle="--",
                label=f"{mode} p95",
            )
        cpu.set(title="CPU of all processes (%)", xlabel="orders/s")
        lat.set(title="order response time (ms)", xlabel="orders/s")
        cpu.legend()
        lat.legend()
        fig.tight_layout()
        fig.savefig(out / "overhead.png", dpi=110)
        plt.close(fig)
        names.append("overhead.png")
    return names


def write_outputs(results: dict[str, Any], out: Path) -> None:
    """Write results.json, the plots and report.md into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    results["plots"] = plot(results, out)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "report.md").write_text(markdown(results))
