"""The fuzz targets of bench/fuzz under hypothesis: the same oracles as the long atheris runs
(`python -m bench fuzz`), a few thousand inputs each, on every test run.

Inputs are raw bytes, valid messages with bytes spliced in (where decoders break), and the
seeds themselves; each target raises only for a defect (bench/fuzz/targets.py says which).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz.run import parse_output, render
from bench.fuzz.targets import TARGETS, seeds

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _spliced(seed: bytes) -> st.SearchStrategy[bytes]:
    """`seed` with a run of bytes replaced by fuzz bytes (JSON and protobuf break at edges)."""
    return st.tuples(st.integers(0, len(seed)), st.integers(0, 16), st.binary(max_size=16)).map(
        lambda t: seed[: t[0]] + t[2] + seed[t[0] + t[1] :]
    )


def _inputs(target: str) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=512),
        st.sampled_from(seeds(target)).flatmap(_spliced),
    )


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_target(target: str) -> None:
    check: Callable[[bytes], None] = TARGETS[target]

    @FUZZ
    @given(_inputs(target))
    def run(data: bytes) -> None:
        check(data)

    run()


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_seeds_are_valid(target: str) -> None:
    for seed in seeds(target):
        TARGETS[target](seed)


# Inputs the long atheris runs found defects with (base64), kept so they stay fixed.
FOUND = {
    "update_proto": [
        # an expiry of 2.2e14 s: its milliseconds did not survive a float, so the update read
        # back from JSON differed from the one read from protobuf
        "CgdwYXltZW50EgMqbnQSAyogKiIcCgdwYXltZW4AEgMqICoaDGNpcmN1aXQgb3BlbiiI998qIhwKBy5heW1lbgAS"
        "AyogKhoMY2lyY3VpdCBvcGVuKIj3tN+rMzCDgImUi5EDEgMqICoiHAoHcGF5bWVudBIDKiAqGgxjaXJjdWl0IG9w"
        "ZW4oiPfftIuWi5EDOiCyARrtPyk0ZqATzmXxGlYJBasZiUj3vdoUbj3+KO3fxQ==",
    ],
}


@pytest.mark.parametrize(
    ("target", "encoded"), [(t, e) for t, inputs in FOUND.items() for e in inputs]
)
def test_inputs_that_found_defects(target: str, encoded: str) -> None:
    TARGETS[target](base64.b64decode(encoded))


CRASH_LOG = """\
#2	INITED cov: 110 ft: 200 corp: 3/900b exec/s: 0 rss: 49Mb
#9819	REDUCE cov: 119 ft: 230 corp: 18/4337b lim: 398 exec/s: 0 rss: 49Mb L: 34/388 MS: 2
 === Uncaught Python exception: ===
BadArgument: endpoint: must be 'METHOD /route'
==17257== ERROR: libFuzzer: fuzz target exited
"""

DONE_LOG = """\
#300000	DONE   cov: 136 ft: 312 corp: 39/9895b lim: 2733 exec/s: 37500 rss: 49Mb
Done 300000 runs in 8 second(s)
"""


def test_the_driver_reads_libfuzzer_output(tmp_path: Path) -> None:
    done = parse_output("update_json", DONE_LOG, 8.0, tmp_path)
    assert (done.inputs, done.coverage, done.corpus, done.crashed, done.hung) == (
        300_000,
        136,
        39,
        False,
        False,
    )
    (tmp_path / "crash-477a47e5").write_bytes(b"x")
    crash = parse_output("update_json", CRASH_LOG, 1.0, tmp_path)
    assert crash.crashed and crash.inputs == 9819
    assert crash.artifact is not None and crash.artifact.endswith("crash-477a47e5")
    table = render([done, crash], 1, 1000)
    assert "DEFECTS: update_json" in table
    assert "no crash" not in table
    hang = parse_output("framing", "ALARM: working on the last Unit for 10 seconds\n", 10, tmp_path)
    assert hang.hung
