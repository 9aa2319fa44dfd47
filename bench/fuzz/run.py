"""Coverage-guided fuzzing of the pure decoders with atheris (libFuzzer), bounded in time.

    .venv/bin/python -m bench fuzz                  # 10 minutes, up to 10^6 inputs a target
    .venv/bin/python -m bench fuzz --minutes 30     # longer
    .venv/bin/python -m bench fuzz --quick          # ~1 minute smoke (prints only)
    .venv/bin/python -m bench fuzz --target update_json --runs 5000000

Targets (bench/fuzz/targets.py) run one after another, each in its own process, each until it
has run `--runs` inputs or used its share of `--minutes` (time a target leaves unused goes to
the next). A crash (an exception the decoder should not raise, a broken oracle: a valid message
lost, a mutated one still verifying) or a hang past `--timeout` seconds stops that target and
leaves the input under the work directory. A full run rewrites its section of
docs/reliability.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.cascade.run import write_section

ROOT = Path(__file__).resolve().parents[2]
DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
HEADING = "## Fuzzing"
# Fast raw-bytes decoders first; the structured target (valid messages, slower) takes the rest.
ORDER = ("update_json", "update_proto", "framing_requests", "framing_responses", "update_valid")

_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_STATS = re.compile(r"cov: (\d+) ft: (\d+) corp: (\d+)/")


@dataclass
class Outcome:
    """What one target's run did."""

    target: str
    inputs: int
    seconds: float
    coverage: int
    corpus: int
    crashed: bool
    hung: bool
    artifact: str | None

    @property
    def rate(self) -> float:
        """Inputs per second."""
        return self.inputs / self.seconds if self.seconds else 0.0


def available_targets() -> list[str]:
    """Targets defined by bench/fuzz/targets.py, in run order."""
    from bench.fuzz.targets import TARGETS

    return [t for t in ORDER if t in TARGETS] + sorted(set(TARGETS) - set(ORDER))


def parse_output(target: str, text: str, seconds: float, workdir: Path) -> Outcome:
    """libFuzzer's stderr -> an Outcome (the last stats line, the `Done` line, artifacts)."""
    done = _DONE.search(text)
    stats = _STATS.findall(text)
    executed = re.findall(r"^#(\d+)\s", text, re.MULTILINE)
    inputs = int(done.group(1)) if done else int(executed[-1]) if executed else 0
    artifacts = sorted(p.name for p in workdir.glob("*-*") if p.name.split("-")[0] in _KINDS)
    crashed = any(a.startswith(("crash-", "oom-", "leak-")) for a in artifacts) or (
        "Uncaught Python exception" in text
    )
    hung = any(a.startswith(("timeout-", "slow-unit-")) for a in artifacts) or "ALARM" in text
    return Outcome(
        target,
        inputs,
        seconds,
        int(stats[-1][0]) if stats else 0,
        int(stats[-1][2]) if stats else 0,
        crashed,
        hung,
        str(workdir / artifacts[0]) if artifacts else None,
    )


_KINDS = {"crash", "oom", "leak", "timeout", "slow"}


def fuzz_one(target: str, runs: int, seconds: int, timeout: int, workdir: Path) -> Outcome:
    """One worker process for `target`; its output goes to `workdir/<target>.log`."""
    workdir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "bench.fuzz.worker",
        target,
        str(workdir / "corpus"),
        f"-runs={runs}",
        f"-max_total_time={max(seconds, 1)}",
        f"-timeout={timeout}",
        "-max_len=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={workdir}/",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    started = time.monotonic()
    log = workdir / f"{target}.log"
    # The hard stop covers a worker that wedges outside libFuzzer's own clock.
    with log.open("wb") as sink, contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, timeout=seconds + 120
        )
    elapsed = time.monotonic() - started
    return parse_output(target, log.read_text(errors="replace"), elapsed, workdir)


def render(outcomes: list[Outcome], minutes: float, runs: int) -> str:
    """The markdown table and a verdict line."""
    lines = [
        "| target | inputs | seconds | inputs/s | coverage (edges) | corpus | crash | hang |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| `{o.target}` | {o.inputs:,} | {o.seconds:.0f} | {o.rate:,.0f} | {o.coverage} "
            f"| {o.corpus} | {'**yes**' if o.crashed else 'no'} | {'**yes**' if o.hung else 'no'} |"
        )
    total = sum(o.inputs for o in outcomes)
    bad = [o for o in outcomes if o.crashed or o.hung]
    lines.append("")
    lines.append(
        f"{total:,} inputs in {sum(o.seconds for o in outcomes):.0f} s "
        f"(budget {minutes:g} min, at most {runs:,} a target): "
        + (
            "no crash, no hang, no valid message lost."
            if not bad
            else "DEFECTS: " + ", ".join(f"{o.target} -> {o.artifact}" for o in bad)
        )
    )
    return "\n".join(lines)


def _load_average() -> str:
    """The machine's 1-minute load average (other work on a shared machine shows here)."""
    with contextlib.suppress(OSError):
        return Path("/proc/loadavg").read_text().split()[0]
    return "?"


def main(argv: list[str] | None = None) -> int:
    """Run the targets; exit 1 when any crashed or hung."""
    parser = argparse.ArgumentParser(
        prog="python -m bench fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="total budget (default 10)")
    parser.add_argument("--runs", type=int, default=1_000_000, help="inputs a target at most")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    parser.add_argument("--target", action="append", help="only these targets (repeatable)")
    parser.add_argument("--quick", action="store_true", help="1 minute, 50,000 inputs a target")
    parser.add_argument("--workdir", type=Path, help="corpus, logs, crashing inputs")
    args = parser.parse_args(argv)
    if args.quick:
        args.minutes, args.runs = min(args.minutes, 1.0), min(args.runs, 50_000)
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("bench fuzz: atheris is not installed (pip install -e '.[bench]')", file=sys.stderr)
        return 2
    targets = available_targets()
    unknown = set(args.target or ()) - set(targets)
    if unknown:
        print(f"bench fuzz: no target {sorted(unknown)}; present: {targets}", file=sys.stderr)
        return 2
    chosen = [t for t in targets if not args.target or t in args.target]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ccb-fuzz-"))
    deadline = time.monotonic() + args.minutes * 60
    load_before = _load_average()
    outcomes = []
    for n, target in enumerate(chosen):
        share = int((deadline - time.monotonic()) / (len(chosen) - n))
        print(f"fuzz {target}: up to {args.runs:,} inputs or {share} s", flush=True)
        outcome = fuzz_one(target, args.runs, share, args.timeout, workdir / target)
        print(
            f"  {outcome.inputs:,} inputs, {outcome.rate:,.0f}/s, crash={outcome.crashed} "
            f"hang={outcome.hung}",
            flush=True,
        )
        outcomes.append(outcome)
    table = render(outcomes, args.minutes, args.runs)
    print(table)
    print(f"work directory: {workdir}")
    if not args.quick and not args.target:
        machine = (
            f"Python {platform.python_version()}, {os.cpu_count()} cores, load average "
            f"{load_before} at the start and {_load_average()} at the end"
        )
        write_section(
            DOC,
            f"{HEADING}\n\nLatest run: `python -m bench fuzz --minutes {args.minutes:g}` "
            f"({machine}, {time.strftime('%Y-%m-%d')}).\n\n{table}\n",
        )
    return 1 if any(o.crashed or o.hung for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
