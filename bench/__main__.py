"""`python -m bench [SUITE ...] [ARGS]`: run every benchmark suite present, or the named ones.

A suite is a directory `bench/<name>/` with a `run.py` defining `main(argv) -> int`. Suites run
one after another in name order (`core` first). ARGS (from the first argument starting with `-`,
or after `--`) go to every suite named: `python -m bench sidecar --quick`. The long reliability
runs (`chaos`, `fuzz`) run only when named.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("core",)  # suites that should run first; the rest follow alphabetically
# Long, bounded runs (10 minutes by default) that run only when named: `python -m bench chaos`.
ON_DEMAND = ("chaos", "fuzz")


def suites() -> list[str]:
    """Names of the suites present: `bench/<name>/run.py` files."""
    names = sorted(p.parent.name for p in HERE.glob("*/run.py"))
    return [n for n in ORDER if n in names] + [n for n in names if n not in ORDER]


def main(argv: list[str] | None = None) -> int:
    """Run the chosen suites; the exit code is the first non-zero one (0 when all pass)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        print("suites:", ", ".join(suites()) or "(none)")
        return 0
    cut = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    extra = args[cut + 1 :] if args[cut : cut + 1] == ["--"] else args[cut:]
    args = args[:cut]
    available = suites()
    unknown = [a for a in args if a not in available]
    if unknown:
        print(
            f"bench: no suite {', '.join(unknown)}; present: {', '.join(available)}",
            file=sys.stderr,
        )
        return 2
    status = 0
    for name in args or [n for n in available if n not in ON_DEMAND]:
        print(f"== bench {name} ==", flush=True)
        module = importlib.import_module(f"bench.{name}.run")
        code = int(module.main(extra) or 0)
        if code and not status:
            status = code
    return status


if __name__ == "__main__":
    raise SystemExit(main())
