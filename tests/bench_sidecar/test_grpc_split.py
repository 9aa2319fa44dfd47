"""The gRPC split benchmark's table (the measuring is not a test: it is about speed)."""

from __future__ import annotations

from bench.sidecar.grpc_split import KINDS, render


def test_each_server_shows_its_step_from_the_one_above_and_the_warm_loop_beside_it() -> None:
    p50 = {"bare GET": [370.0, 380.0, 360.0], "pipeline": [430.0] * 3, "full Call": [428.0] * 3}
    cpu = {"bare GET": [240.0, 230.0, 250.0], "pipeline": [282.5] * 3, "full Call": [280.0] * 3}
    table = render(p50, cpu, 25.5, 28.0, 3).splitlines()
    assert table[0] == "gRPC Call, 1 connection, medians of 3 rounds:"
    assert table[4] == "| bare GET | 370 | 240.0 | - | 25.5 |"
    assert table[5] == "| pipeline | 430 | 282.5 | +42.5 | 28.0 |"
    assert table[6] == "| full Call | 428 | 280.0 | -2.5 | - |"
    assert [row.split(" | ")[0].lstrip("| ") for row in table[4:]] == list(KINDS)
