"""Tables for the core benchmark: a rich table on the terminal, markdown in docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from bench.core.redis_mode import TARGET_RATIO, RedisRow, redis_verdicts

if TYPE_CHECKING:
    from bench.core.run import Row

SECTION = "## Core library"
OTHER_SECTIONS = "## Sidecar\n\n(not measured yet)\n"
RERUN = ".venv/bin/python bench/core/run.py"
# The targets are for the call forms; `with b:` is reported, not targeted.
NOTES = [
    "`best` is the headline: on a shared machine the median carries other processes' noise.",
    "`with b:` / `async with b:` are reported, not targeted: every block keeps its own entry "
    "(its round, or its permit off the closed path) by the frame running the `with` statement, "
    "so interleaved generators, tasks and blocks resumed on other threads each settle their "
    "own permit (docs/architecture.md). That costs two frame lookups and a dict entry per "
    "block; the call forms inline the closed path and skip all of it.",
    "The wall-clock table moves with the machine's load; the section below counts the closed "
    "path's instructions with callgrind, which a busy machine cannot skew.",
    "pybreaker's async path runs Tornado coroutines, not asyncio; it has no async row.",
    "purgatory's decorator looks its breaker up on every call; `with brk:` reuses one.",
]
TARGETED = {"b.call(fn)", "@b decorator", "await b.acall(afn)"}


def _ns(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def verdicts(rows: list[Row], targets: dict[str, float]) -> list[str]:
    """One line per cascadebreaker form: met or missed its target, and by how much."""
    lines = []
    for r in rows:
        if r.library != "cascadebreaker" or r.over_best is None or r.form not in TARGETED:
            continue
        target = targets[r.mode]
        if r.over_best <= target:
            verdict = f"met (≤ {target:.0f} ns)"
        else:
            verdict = f"MISSED by {r.over_best - target:,.0f} ns (target {target:.0f} ns)"
        lines.append(f"{r.mode} `{r.form}`: {r.over_best:,.0f} ns over bare: {verdict}")
    return lines


def render_rich(
    rows: list[Row], env: dict[str, str], targets: dict[str, float], redis_rows: list[RedisRow]
) -> None:
    """Print the result table and the verdicts."""
    console = Console(width=max(Console().width, 150))
    for mode in ("sync", "async"):
        table = Table(title=f"Closed-path overhead per call, {mode} (ns over a bare call)")
        for column in ("library", "version", "form", "best", "median", "x fastest peer", "note"):
            table.add_column(column, justify="right" if column in ("best", "median") else "left")
        for r in rows:
            if r.mode != mode:
                continue
            style = "bold green" if r.library == "cascadebreaker" else None
            table.add_row(
                r.library,
                r.version,
                r.form,
                _ns(r.over_best),
                _ns(r.over_median),
                _ratio(r.ratio),
                r.note,
                style=style,
            )
        console.print(table)
    if redis_rows:
        table = Table(title="Redis mode: cost per call (ns over a bare call)")
        for column in ("library", "version", "form", "mode", "best", "median", "cheaper", "note"):
            table.add_column(column, justify="right" if column in ("best", "median") else "left")
        for rr in redis_rows:
            cells = [rr.library, rr.version, rr.form, rr.mode, _ns(rr.over_best)]
            table.add_row(*cells, _ns(rr.over_median), _cheaper(rr.cheaper), rr.note)
        console.print(table)
    console.print(" · ".join(f"{k}: {v}" for k, v in env.items()))
    for line in verdicts(rows, targets) + redis_verdicts(redis_rows):
        console.print(line.replace("`", ""))


def _cheaper(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}x"


def _redis_markdown(redis_rows: list[RedisRow]) -> list[str]:
    if not redis_rows:
        return []
    out = [
        "### Redis mode",
        "",
        "Per-call cost of a breaker whose state is shared through Redis (a throwaway",
        "redis-server on loopback, started by the benchmark), circuit closed, calls succeed.",
        "`cheaper` is pybreaker's per-call cost divided by the row's",
        f"(target ≥ {TARGET_RATIO:.0f}x).",
        "",
        "| library | version | form | mode | best ns | median ns | cheaper | note |",
        "|---|---|---|---|--:|--:|--:|---|",
    ]
    for r in redis_rows:
        name = f"**{r.library}**" if r.library == "cascadebreaker" else r.library
        cells = [name, r.version, f"`{r.form}`", r.mode, _ns(r.over_best), _ns(r.over_median)]
        cells += [_cheaper(r.cheaper), r.note.replace("|", "/")]
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


def render_markdown(
    rows: list[Row], env: dict[str, str], targets: dict[str, float], redis_rows: list[RedisRow]
) -> str:
    """The `## Core library` section."""
    out = [
        SECTION,
        "",
        "Closed-path overhead per call (circuit CLOSED, the call succeeds): nanoseconds over a",
        "bare call, measured in one run for every library. Each case is its own compiled tight",
        "loop around the same trivial function (`fn()` returns 1; `afn()` is a coroutine that",
        "never suspends), timed with `time.perf_counter_ns` with the GC off; rounds are",
        "interleaved across cases; **best** and **median** are over the rounds, each minus the",
        "bare call's best / median. `x fastest peer` compares best-of overheads with the fastest",
        "other library in the same mode. Breakers trip after 5 consecutive failures where the",
        "library allows (interlock-cb uses its default failure-rate window).",
        "",
        f"Rerun: `{RERUN}` (about a minute; `--quick` for a short run that writes nothing).",
        "",
        "Measured: " + "; ".join(f"{k} {v}" for k, v in env.items()) + ".",
        "",
    ]
    for mode in ("sync", "async"):
        out += [
            f"### {mode.capitalize()}",
            "",
            "| library | version | form | best ns | median ns | x fastest peer | note |",
            "|---|---|---|--:|--:|--:|---|",
        ]
        for r in rows:
            if r.mode != mode:
                continue
            name = f"**{r.library}**" if r.library == "cascadebreaker" else r.library
            cells = [name, r.version, f"`{r.form}`", _ns(r.over_best), _ns(r.over_median)]
            cells += [_ratio(r.ratio), r.note.replace("|", "/")]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out += _redis_markdown(redis_rows)
    out += [
        f"Targets: ≤ {targets['sync']:.0f} ns sync, ≤ {targets['async']:.0f} ns async over bare;",
        f"Redis mode ≥ {TARGET_RATIO:.0f}x cheaper per call than pybreaker's Redis storage.",
        "",
    ]
    out += [f"- {line}" for line in verdicts(rows, targets) + redis_verdicts(redis_rows)]
    out += ["", "Notes:", ""] + [f"- {note}" for note in NOTES]
    return "\n".join(out) + "\n"


def write_section(doc: Path, section: str, title: str = SECTION) -> None:
    """Replace the `title` section (`## ...`) of `doc`, leaving every other section alone.

    A section that writes no subsections (`### ...`) of its own replaces only its text up to
    the first one: the subsections under it are history written by hand, which no run
    rewrites.
    """
    if not doc.exists():
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(f"# Benchmarks\n\n{section}\n{OTHER_SECTIONS}")
        return
    lines = doc.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == title), None)
    if start is None:
        text = "".join(lines).rstrip("\n") + "\n\n" + section
        doc.write_text(text)
        return
    ends = ("## ",) if "\n### " in section else ("## ", "### ")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith(ends)),
        len(lines),
    )
    tail = "".join(lines[end:])
    doc.write_text("".join(lines[:start]) + section + ("\n" + tail if tail else ""))
