"""One atheris (libFuzzer) run of one target: `python -m bench.fuzz.worker TARGET CORPUS [ARGS]`.

ARGS are libFuzzer's (`-runs=N -max_total_time=S -timeout=S`). The run driver (`run.py`) starts
one worker per target, reads libFuzzer's summary from stderr and reports it. A defect (an
exception out of the target, an assertion of its oracle, a hang past `-timeout`) makes libFuzzer
write the input to `crash-*` / `timeout-*` in the working directory and exit non-zero.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Coverage of the product's code guides the fuzzer; the oracle itself is not instrumented.
with atheris.instrument_imports(include=["cascadebreaker"]):
    from bench.fuzz.targets import TARGETS, seeds


def main(argv: list[str]) -> None:
    """Seed the corpus directory, then fuzz until libFuzzer's limits stop it."""
    name, corpus = argv[1], Path(argv[2])
    corpus.mkdir(parents=True, exist_ok=True)
    for n, seed in enumerate(seeds(name)):
        (corpus / f"seed-{n}").write_bytes(seed)
    target = TARGETS[name]
    atheris.Setup([argv[0], *argv[3:], str(corpus)], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
