"""The PGO comparison's table (building and measuring are benchmarks, not tests)."""

from __future__ import annotations

from bench.sidecar.pgo import _SETUP, render


def test_each_build_is_a_row_of_medians_over_rounds() -> None:
    rows = {
        "compiled": {"gRPC Call p50 µs": [430.0, 440.0, 420.0], "wrk 16 conns req/s": [5e4] * 3},
        "compiled, PGO": {
            "gRPC Call p50 µs": [410.0, 400.0, 415.0],
            "wrk 16 conns req/s": [5.1e4] * 3,
        },
    }
    lines = render(rows, 3)
    assert lines[0] == "medians of 3 interleaved rounds:"
    assert lines[2] == "| build | gRPC Call p50 µs | wrk 16 conns req/s |"
    assert lines[4] == "| compiled | 430.0 | 50,000.0 |"
    assert lines[5] == "| compiled, PGO | 410.0 | 51,000.0 |"


def test_the_setup_script_compiles_the_modules_it_is_given() -> None:
    script = _SETUP.format(args=["--ignore-missing-imports", "src/cascadebreaker/permit.py"])
    compile(script, "setup.py", "exec")  # valid Python
    assert "mypycify(['--ignore-missing-imports', 'src/cascadebreaker/permit.py'])" in script
