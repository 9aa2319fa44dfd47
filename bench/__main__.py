"""`python -m bench [SUITE ...] [-- ARGS]`: run every benchmark suite present, or the named ones.

A suite is a directory `bench/<name>/` with a `run.py` defining `main(argv) -> int`. Suites run
one after another in name order (`core` first); ARGS after `--` go to every suite named.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("core",)  # suites that should run first; the rest follow alphabetically


def suites() -> list[str]:
    """Names of the suites present: `bench/<name>/run.py` files."""
    names = sorted(p.parent.name for p in HERE.glob("*/run.py"))
    return [n for n in ORDER if n in names] + [n for n in names if n not in ORDER]


def main(argv: list[str] | None = None) -> int:
    """Run the chosen suites; the exit code is the first non-zero one (0 when all pass)."""
    args = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, extra = args[:cut], args[cut + 1 :]
    available = suites()
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        print("suites:", ", ".join(available) or "(none)")
        return 0
    unknown = [a for a in args if a not in available]
    if unknown:
        print(
            f"bench: no suite {', '.join(unknown)}; present: {', '.join(available)}",
            file=sys.stderr,
        )
        return 2
    status = 0
    for name in args or available:
        print(f"== bench {name} ==", flush=True)
        module = importlib.import_module(f"bench.{name}.run")
        code = int(module.main(extra) or 0)
        if code and not status:
            status = code
    return status


if __name__ == "__main__":
    raise SystemExit(main())
