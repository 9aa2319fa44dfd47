"""The live terminal view of the demo (rich): services, breakers, unavailable endpoints, orders."""

from __future__ import annotations

import math
import time

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from cascadebreaker.demo.story import StoryState
from cascadebreaker.demo.topology import Topology

# Counters worth a glance per service (the rest stays in /_stats).
_HEADLINE: dict[str, tuple[tuple[str, str], ...]] = {
    "gateway": (
        ("orders_ok", "ok"),
        ("orders_failed", "failed"),
        ("orders_refused", "refused"),
        ("orders_error", "err"),
    ),
    "order": (
        ("sagas_started", "sagas"),
        ("sagas_failed", "failed"),
        ("sagas_refused", "refused"),
        ("compensations", "comp"),
    ),
    "inventory": (("reservations_made", "reserved"), ("reservations_released", "released")),
    "payment": (("charges", "charged"), ("refunds", "refunded"), ("charges_failed", "failed")),
    "shipping": (("shipments", "shipped"), ("shipments_failed", "failed")),
    "payment-gateway": (("ok", "ok"), ("faulted", "faulted")),
    "courier": (("ok", "ok"), ("faulted", "faulted")),
}
_STATE_STYLE = {"CLOSED": "green", "OPEN": "bold red", "HALF_OPEN": "yellow"}


def addresses(topology: Topology) -> Table:
    """Where every service (and sidecar) listens."""
    table = Table(title=f"ccb demo — mode {topology.mode.value}", title_justify="left")
    for column in ("service", "app", "ingress", "sidecar admin"):
        table.add_column(column)
    for spec in topology.services.values():
        table.add_row(spec.name, spec.app_url, spec.ingress_url, spec.admin_url or "-")
    return table


def _breakers(states: dict[str, str]) -> Text:
    text = Text()
    for i, (upstream, state) in enumerate(sorted(states.items())):
        if i:
            text.append(" ")
        text.append(f"{upstream} ", style="dim")
        text.append(
            state.upper().replace("HALF_OPEN", "HALF"), style=_STATE_STYLE.get(state.upper(), "")
        )
    return text


def services_table(state: StoryState) -> Table:
    """One row per service: up, headline counters, breaker states, unavailable endpoints."""
    table = Table(expand=True)
    table.add_column("service")
    table.add_column("up")
    table.add_column("work")
    table.add_column("breakers")
    table.add_column("unavailable / fault")
    for name in state.topology.services:
        view = state.views.get(name)
        if view is None:
            table.add_row(name, "?", "", "", "")
            continue
        headline = _HEADLINE.get(name, ())
        work = " ".join(f"{label} {view.counts.get(key, 0)}" for key, label in headline)
        trouble = "; ".join(view.unavailable) or (view.fault or "")
        table.add_row(
            name,
            Text("up", style="green") if view.up else Text("DOWN", style="bold red"),
            work,
            _breakers(view.breakers),
            Text(trouble, style="red" if trouble else ""),
        )
    return table


def chapters_table(state: StoryState) -> Table:
    """Orders per chapter and the work they caused (compensations are the waste)."""
    table = Table(title="orders per chapter", title_justify="left")
    for column in (
        "chapter",
        "ok",
        "failed",
        "refused",
        "error",
        "reserved",
        "charged",
        "undone",
    ):
        if column == "chapter":
            table.add_column(column, no_wrap=True)
        else:
            table.add_column(column, justify="right")
    for tally in state.tallies:
        o = tally.outcomes
        table.add_row(
            tally.title,
            str(o["ok"]),
            str(o["failed"]),
            str(o["refused"]),
            str(o["error"]),
            str(tally.reservations),
            str(tally.charges),
            str(tally.compensations),
        )
    return table


def summary_lines(state: StoryState) -> list[str]:
    """One plain line per chapter (for logs and terminals alike)."""
    return [
        f"{t.title}: ok {t.outcomes['ok']}, failed {t.outcomes['failed']}, "
        f"refused {t.outcomes['refused']}, error {t.outcomes['error']}; "
        f"reserved {t.reservations}, charged {t.charges}, compensated {t.compensations}"
        for t in state.tallies
    ]


def render(state: StoryState) -> RenderableType:
    """The whole live view."""
    if state.chapter is None:
        header = Text("starting…")
    else:
        elapsed = time.monotonic() - state.chapter_started
        if state.done:
            status = "done"
        elif math.isinf(state.chapter.seconds):
            status = f"{elapsed:.0f}s"
        else:
            status = f"{elapsed:4.1f}s / {state.chapter.seconds:.0f}s"
        header = Text.assemble(
            (f"{state.chapter.title}", "bold"), f"  ({status})\n", (state.chapter.caption, "italic")
        )
    return Group(
        Panel(header, title=f"mode {state.topology.mode.value}"),
        services_table(state),
        chapters_table(state),
    )
