"""The compiled build's verdicts in every recorded run of `python -m bench sidecar`.

    .venv/bin/python -m bench.sidecar.history [--since 2026-12-05] [--doc docs/benchmarks.md]

Each run rewrites the `## Sidecar` section of docs/benchmarks.md, and each run that was kept
landed in a commit. This reads that section at every commit that changed the file (a run is
told by the section's `- date:` line; the first commit holding it is named), takes the
compiled build's rows of the targets tables, halting and polling, and sorts each verdict as
the report wrote it:

- met;
- floor: missed, and the Python floor misses it too (no Python proxy on httptools + uvloop
  meets it on that machine: not ours to remove);
- ours: missed where the floor meets it.

It prints each run with the targets it missed, then for each target and idle mode how many
runs gave each verdict: one run's verdicts flip with the machine and the hour, several runs
say what is ours. `--quiet` counts only the runs on a quiet host: other processes (the
hypervisor's steal included) used less than the report's busy-host line of CPU meanwhile;
`--last N` only the latest N runs left after the other filters.

Each target and mode is then judged over the runs counted: it passes when it was met, or
missed only where the floor misses too, in at least two runs of three. One run cannot say
this (each verdict sits within a few percent of its line, and flips with the hour); a target
that is ours in more than a third of the runs is a gap in our code. Where the runs came from
more than one kind of CPU, each target is judged again over each CPU's runs alone, grouped by
the CPU's model name (the one thing about the machine that every run recorded): a verdict
that holds on one kind and not the other is that machine's as much as the code's.

`--write DOC` puts the same tables into DOC as the section "The compiled build's verdicts
across runs" (replacing it, or appending it), with the command that made them, so the
document's numbers are regenerated, not copied.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.sidecar` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.core.report import write_section
from bench.sidecar.report import BUSY_HOST_CPUS, COMPILED, SECTION, _table

HALTING = "halting"
POLLING = "polling"
MODES = (HALTING, POLLING)
MET, FLOOR, OURS, MISSED = "met", "floor", "ours", "missed"
VERDICTS = (MET, FLOOR, OURS, MISSED)  # MISSED: a miss the report could not attribute
_OTHER_MODE = "### The same rounds with "
_TARGETS = "### Targets"
_OTHER_CPUS = "CPU used by other processes during the run"
ACROSS = "### The compiled build's verdicts across runs"
PASS_SHARE = 2 / 3  # met, or missed only where the floor misses too, in >= 2 runs of 3


@dataclass
class Run:
    """One recorded run: where and when, and its compiled verdicts by mode and target."""

    date: str
    machine: str = ""
    python: str = ""
    commit: str = ""
    other_cpus: float | None = None  # CPUs other processes used meanwhile; None: not recorded
    verdicts: dict[str, dict[str, str]] = field(default_factory=dict)  # mode -> target -> verdict

    def missed(self, mode: str, kind: str) -> list[str]:
        return [t for t, v in self.verdicts.get(mode, {}).items() if v == kind]

    @property
    def quiet(self) -> bool:
        return self.other_cpus is not None and self.other_cpus < BUSY_HOST_CPUS


def _cpus(text: str) -> float | None:
    """`0.11 CPUs (stolen by the hypervisor: 0.00)` -> 0.11; None when unreadable."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def classify(verdict: str) -> str:
    """A verdict cell of the report as met / floor / ours (/ missed, unattributed)."""
    text = verdict.strip()
    if text.startswith("met"):
        return MET
    if "below the Python floor" in text:
        return FLOOR
    if "ours" in text:
        return OURS
    return MISSED


def section_of(doc: str) -> str | None:
    """The `## Sidecar` section of a benchmarks document (up to the next `## ` heading)."""
    lines = doc.splitlines()
    try:
        start = lines.index(SECTION)
    except ValueError:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), None)
    return "\n".join(lines[start:end])


def _mode_of(text: str) -> str:
    return POLLING if "polling" in text else HALTING


def _compiled_rows(lines: Iterable[str]) -> dict[str, str]:
    """target -> verdict, from the compiled build's rows of the first targets table in `lines`
    (a table ends at the first line that is not a row)."""
    out: dict[str, str] = {}
    in_table = False
    for line in lines:
        if not line.startswith("|"):
            if in_table:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "target":
            in_table = True
            continue
        if not in_table or len(cells) < 3 or COMPILED not in cells[0]:
            continue
        what = cells[0].split(": ", 1)[0].replace(COMPILED, "")
        out[what] = classify(cells[2])
    return out


def parse_section(section: str, commit: str = "") -> Run | None:
    """A run from its `## Sidecar` section; None without a date or compiled verdicts."""
    env: dict[str, str] = {}
    for line in section.splitlines():
        if line.startswith("- ") and ": " in line:
            key, value = line[2:].split(": ", 1)
            env.setdefault(key, value)
    if "date" not in env:
        return None
    run = Run(env["date"], env.get("machine", ""), env.get("python", ""), commit)
    run.other_cpus = _cpus(env.get(_OTHER_CPUS, ""))
    lines = section.splitlines()
    other = next((i for i, line in enumerate(lines) if line.startswith(_OTHER_MODE)), len(lines))
    main = lines[:other]
    start = next((i for i, line in enumerate(main) if line.startswith(_TARGETS)), None)
    if start is not None:
        rows = _compiled_rows(main[start:])
        if rows:
            run.verdicts[_mode_of(env.get("CPU idle", "").split(";")[0])] = rows
    if other < len(lines):
        rows = _compiled_rows(lines[other:])
        if rows:
            run.verdicts[_mode_of(lines[other])] = rows
    return run if run.verdicts else None


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def runs_in_history(repo: Path, doc: str = "docs/benchmarks.md") -> list[Run]:
    """Every run recorded in `doc` over the repository's history, oldest first."""
    runs: dict[str, Run] = {}
    for commit in _git(repo, "log", "--reverse", "--format=%H", "--", doc).split():
        try:
            text = _git(repo, "show", f"{commit}:{doc}")
        except subprocess.CalledProcessError:  # the file was deleted in this commit
            continue
        section = section_of(text)
        run = None if section is None else parse_section(section, commit[:7])
        if run is not None and run.date not in runs:
            runs[run.date] = run
    return sorted(runs.values(), key=lambda r: r.date)


def _cpu(machine: str) -> str:
    """`x86_64, 2 CPUs (Intel(R) Xeon(R) Processor; family 6 model 167; L2 2 MiB, L3 480 MiB),
    Linux ...` -> `Intel Xeon Processor; family 6 model 167; L2 2 MiB, L3 480 MiB` (the family,
    model and caches recorded since 2026-12-07)."""
    head = machine.rsplit(", Linux", 1)[0]
    if not head.endswith(")") or "(" not in head:
        return "not recorded"
    model = head[head.index("(") + 1 : -1]
    return model.replace("(R)", "").replace("(TM)", "")


def _python(python: str) -> str:
    """`3.11.7 (uvloop 0.23.0); 13.4 µs per sum(range(1000))` -> `13.4 µs`."""
    speed = python.rsplit("; ", 1)[-1]
    return speed.split(" per ", 1)[0] if " per " in speed else "not recorded"


def judge(counts: Counter[str]) -> str:
    """`passes` when met or floor-limited in at least PASS_SHARE of the runs counted."""
    runs = sum(counts.values())
    kept = counts[MET] + counts[FLOOR]
    if runs and kept >= PASS_SHARE * runs:
        return f"passes ({kept} of {runs})"
    return f"**fails**: ours or unattributed in {runs - kept} of {runs}"


def tally(runs: Sequence[Run]) -> dict[tuple[str, str], Counter[str]]:
    """How many of `runs` gave each verdict, by (target, idle mode), sorted by target, then
    mode in the order of MODES."""
    counts: dict[tuple[str, str], Counter[str]] = {}
    for run in runs:
        for mode, rows in run.verdicts.items():
            for target, verdict in rows.items():
                counts.setdefault((target, mode), Counter())[verdict] += 1
    return dict(sorted(counts.items(), key=lambda kv: (kv[0][0], MODES.index(kv[0][1]))))


def render(runs: Sequence[Run]) -> str:
    """The runs, then the counts by target and mode, as markdown."""
    lines = [
        f"{len(runs)} recorded runs; the compiled build's misses in each, halting / polling "
        "(floor: the Python floor misses it too; ours: the floor meets it):",
        "",
    ]

    def misses(run: Run, mode: str) -> str:
        if mode not in run.verdicts:
            return "not run"
        parts = [f"{t} (ours)" for t in run.missed(mode, OURS)]
        parts += [f"{t} (floor)" for t in run.missed(mode, FLOOR)]
        parts += [f"{t} (missed)" for t in run.missed(mode, MISSED)]
        return "; ".join(parts) or "none"

    lines += _table(
        [
            "date",
            "commit",
            "CPU",
            "Python per sum(range(1000))",
            "other processes, CPUs",
            "halting: missed",
            "polling: missed",
        ],
        [
            [
                r.date,
                r.commit,
                _cpu(r.machine),
                _python(r.python),
                "not recorded" if r.other_cpus is None else f"{r.other_cpus:.2f}",
                *(misses(r, m) for m in MODES),
            ]
            for r in runs
        ],
    )
    counts = tally(runs)
    lines += [
        "",
        "Verdicts by target and idle mode, runs (judged: met, or missed only where the floor "
        "misses too, in at least 2 runs of 3):",
        "",
    ]
    lines += _table(
        ["target", "mode", "met", "floor misses too", "ours", "runs", "judged over these runs"],
        [
            [
                t,
                m,
                str(c[MET]),
                str(c[FLOOR]),
                str(c[OURS]),
                str(sum(c.values())),
                judge(c),
            ]
            for (t, m), c in counts.items()
        ],
    )
    lines += _by_cpu(runs)
    clean = {m: sum(1 for r in runs if m in r.verdicts and not r.missed(m, OURS)) for m in MODES}
    ran = {m: sum(1 for r in runs if m in r.verdicts) for m in MODES}
    both = sum(1 for r in runs if all(m in r.verdicts and not r.missed(m, OURS) for m in MODES))
    lines += [
        "",
        f"Runs with no miss of ours: halting {clean[HALTING]} of {ran[HALTING]}, polling "
        f"{clean[POLLING]} of {ran[POLLING]}, both modes {both} of {len(runs)}.",
    ]
    return "\n".join(lines) + "\n"


def cpu_name(run: Run) -> str:
    """The CPU's model name without family, model and caches (`AMD EPYC`): runs before
    2026-12-07 recorded only the name, so it is what every run can be grouped by."""
    return _cpu(run.machine).split(";", 1)[0]


def _by_cpu(runs: Sequence[Run]) -> list[str]:
    """Each target and mode judged again over each CPU's runs alone: whether a verdict is the
    code's or one kind of machine's."""
    names = sorted({cpu_name(r) for r in runs})
    if len(names) < 2:
        return []
    by_name = {n: tally([r for r in runs if cpu_name(r) == n]) for n in names}
    lines = [
        "",
        "The same, judged over each CPU's runs alone (by its model name):",
        "",
    ]
    lines += _table(
        ["target", "mode", *names],
        [
            [t, m, *(judge(by_name[n][t, m]) if (t, m) in by_name[n] else "no run" for n in names)]
            for t, m in tally(runs)
        ],
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--doc", default="docs/benchmarks.md", help="the benchmarks document")
    parser.add_argument("--repo", type=Path, default=Path("."), help="the git checkout")
    parser.add_argument("--since", default="", help="only runs dated on or after (YYYY-MM-DD)")
    parser.add_argument(
        "--quiet",
        action="store_true",
        help=f"only runs on a quiet host (other processes below {BUSY_HOST_CPUS:.2f} CPUs)",
    )
    parser.add_argument(
        "--last", type=int, default=0, metavar="N", help="only the latest N runs left"
    )
    parser.add_argument(
        "--write",
        type=Path,
        metavar="DOC",
        help=f'also write the tables into DOC as the section "{ACROSS}"',
    )
    args = parser.parse_args(argv)
    if args.last < 0:
        parser.error("--last: a number of runs, 1 or more (0: all)")
    runs = [r for r in runs_in_history(args.repo, args.doc) if r.date >= args.since]
    left_out = [r for r in runs if not r.quiet] if args.quiet else []
    runs = [r for r in runs if r.quiet] if args.quiet else runs
    runs = runs[-args.last :] if args.last else runs
    if not runs:
        where = " on a quiet host" if args.quiet else ""
        print(f"no recorded run in {args.doc}{where}", file=sys.stderr)
        return 1
    head = ""
    if args.quiet:
        head = (
            f"Quiet hosts only: {len(left_out)} runs left out (other processes at or above "
            f"{BUSY_HOST_CPUS:.2f} CPUs, or not recorded).\n\n"
        )
    text = head + render(runs)
    sys.stdout.write(text)
    if args.write is not None:
        write_section(
            args.write, _section(text, argv if argv is not None else sys.argv[1:]), ACROSS
        )
    return 0


def _section(text: str, argv: Sequence[str]) -> str:
    """The tables as a document section that names the command that regenerates it."""
    command = " ".join(["python -m bench.sidecar.history", *argv])
    return f"{ACROSS}\n\nGenerated by `{command}` (the runs recorded in git history).\n\n{text}"


if __name__ == "__main__":
    raise SystemExit(main())
