"""The sidecar benchmark's pure parts: the doc section it rewrites, targets, profile summary.

The benchmark itself is not a test (it measures speed); these check that it edits only its own
section of the shared docs/benchmarks.md and reads its inputs right.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bench.__main__ import suites
from bench.sidecar.profile import Profile, ProfileError, from_py_spy, serving_argv, summarise
from bench.sidecar.report import (
    GRPC_FETCH,
    HTTPTOOLS_FLOOR,
    HTTPTOOLS_FLOOR_PAIR,
    RELAY_FLOOR_PAIR,
    Cell,
    Report,
    Sample,
    Target,
    failed_cells,
    render,
    targets,
    write_section,
)


def _sample(
    p50: float, p90: float, p99: float, rps: float, cpu: float = 0.0, proc: str = "sidecar"
) -> Sample:
    return Sample(p50, p90, p99, rps, requests=1000, errors=0, cpu={proc: cpu})


def _report() -> Report:
    report = Report(
        scenarios=[
            ("direct", 0, []),
            ("sidecar (outbound)", 1, ["sidecar"]),
            ("nginx proxy", 1, ["nginx-proxy"]),
        ]
    )
    report.wrk[("nginx proxy", 1)] = Cell([_sample(45, 50, 150, 20_000)])
    report.wrk[("direct", 1)] = Cell([_sample(20, 30, 100, 40_000)])
    report.wrk[("sidecar (outbound)", 1)] = Cell([_sample(70, 90, 300, 10_000, cpu=0.05)])
    report.wrk[("direct", 16)] = Cell([_sample(200, 300, 900, 60_000)])
    report.wrk[("sidecar (outbound)", 16)] = Cell([_sample(900, 1500, 3000, 48_000)])
    report.peak_rss_mb = {"sidecar": 30.0, "upstream": 8.0}
    return report


def test_targets_are_ratios_against_nginx_in_the_same_run() -> None:
    """50 µs added p50 against nginx's 25 µs meets 2.0x; 48k req/s against nginx's 50k meets
    0.8x; 30 MiB meets 30 MB; unmeasured targets say so."""
    report = _report()
    report.wrk[("nginx proxy", 16)] = Cell([_sample(300, 400, 900, 50_000)])
    verdicts = {t.what.split(":")[0]: (t.measured, t.verdict) for t in targets(report)}
    assert verdicts["added p50 per hop, 1 conn"] == ("50 µs (2.00x nginx)", "met")
    assert verdicts["throughput at 16 conns"] == ("48,000 req/s (0.96x nginx)", "met")
    assert verdicts["peak RSS of sidecar"][1] == "met"
    assert verdicts["pair at 1000 rps, added p90"] == ("not measured", "-")
    assert verdicts["gRPC Call p50, 1 conn"] == ("not measured", "-")


def test_targets_show_nginx_by_the_same_measure() -> None:
    """The peer column: nginx's added p50 per hop next to the sidecar's."""
    peers = {t.what.split(":")[0]: t.nginx for t in targets(_report())}
    assert peers["added p50 per hop, 1 conn"] == "25 µs"
    assert peers["peak RSS of sidecar"] == "-"


def test_a_missed_target_names_the_gap() -> None:
    """A 200 µs hop at p50 misses 2x nginx's 25 µs by 150 µs; the gRPC path is held to the
    empty server's p50 + 60 µs."""
    report = _report()
    report.wrk[("sidecar (outbound)", 1)] = Cell([_sample(220, 300, 400, 5_000)])
    report.grpc[("empty grpc.aio server", 1)] = Cell([_sample(300, 400, 500, 3_000)])
    report.grpc[("sidecar Call", 1)] = Cell([_sample(400, 500, 600, 2_000)])
    verdicts = {t.what.split(":")[0]: t.verdict for t in targets(report)}
    assert verdicts["added p50 per hop, 1 conn"] == "MISSED by 150 µs"
    assert verdicts["gRPC Call p50, 1 conn"] == "MISSED by 40 µs: ours (the floor meets it)"


def test_a_target_the_python_floor_misses_too_says_so() -> None:
    """The minimal httptools proxy, measured in the same run, adds 60 µs at p50 where 2x nginx
    allows 50: the sidecar's miss is below what any Python proxy reaches, and the verdict says
    it. Where the floor meets the target (throughput), the gap is the sidecar's own."""
    report = _report()
    report.scenarios.append((HTTPTOOLS_FLOOR, 1, ["httptools-floor"]))
    report.wrk[("sidecar (outbound)", 1)] = Cell([_sample(120, 300, 400, 5_000)])
    report.wrk[(HTTPTOOLS_FLOOR, 1)] = Cell([_sample(80, 90, 200, 12_000)])
    report.wrk[("nginx proxy", 16)] = Cell([_sample(300, 400, 900, 50_000)])
    report.wrk[("sidecar (outbound)", 16)] = Cell([_sample(900, 1500, 3000, 30_000)])
    report.wrk[(HTTPTOOLS_FLOOR, 16)] = Cell([_sample(400, 500, 900, 45_000)])
    rows = {t.what.split(":")[0]: t for t in targets(report)}
    hop = rows["added p50 per hop, 1 conn"]
    assert hop.verdict == (
        "MISSED by 50 µs: the target is below the Python floor (the floor misses it by 10 µs)"
    )
    assert hop.floor == "60 µs (2.40x nginx)"
    throughput = rows["throughput at 16 conns"]
    assert throughput.verdict == "MISSED by 10,000 req/s: ours (the floor meets it)"
    assert throughput.floor == "45,000 req/s (0.90x nginx)"


def test_the_floor_of_each_target_is_measured_the_same_way() -> None:
    """CPU at 1000 rps is the floor process's; the pair target uses two floors in a row; a
    sidecar with a gRPC listener is held against the empty grpc.aio server's RSS, one without
    it against the httptools floor's."""
    report = _report()
    report.scenarios += [
        ("sidecar pair", 2, ["sidecar-client", "sidecar-server"]),
        ("nginx pair", 2, ["nginx-front", "nginx-proxy"]),
        (HTTPTOOLS_FLOOR, 1, ["httptools-floor"]),
        (HTTPTOOLS_FLOOR_PAIR, 2, ["httptools-floor-front", "httptools-floor"]),
    ]
    report.paced["direct"] = Cell([_sample(20, 40, 100, 1000)])
    report.paced["sidecar (outbound)"] = Cell([_sample(150, 250, 400, 1000, cpu=0.1)])
    report.paced["nginx proxy"] = Cell([_sample(100, 140, 200, 1000, 0.05, "nginx-proxy")])
    report.paced[HTTPTOOLS_FLOOR] = Cell([_sample(90, 130, 200, 1000, 0.06, "httptools-floor")])
    report.paced["sidecar pair"] = Cell([_sample(300, 400, 600, 1000)])
    report.paced["nginx pair"] = Cell([_sample(150, 200, 300, 1000)])
    report.paced[HTTPTOOLS_FLOOR_PAIR] = Cell([_sample(200, 290, 400, 1000)])
    report.peak_rss_mb = {
        "sidecar": 45.0,
        "sidecar-server": 28.0,
        "grpc-floor": 41.8,
        "httptools-floor": 15.0,
    }
    report.grpc_listeners = ("sidecar",)
    rows = {t.what.split(":")[0]: t for t in targets(report)}
    cpu = rows["CPU per request at 1000 rps"]
    assert (cpu.measured, cpu.floor) == (
        "100 ms/1000 req (2.00x nginx)",
        "60 ms/1000 req (1.20x nginx)",
    )
    assert cpu.verdict == "MISSED by 35 ms/1000 req: ours (the floor meets it)"
    pair = rows["pair at 1000 rps, added p90"]
    assert pair.floor == "250 µs (1.56x nginx), two in a row"
    assert pair.verdict.endswith(
        "the target is below the Python floor (the floor misses it by 42 µs)"
    )
    grpc_rss = rows["peak RSS of sidecar (gRPC listener)"]
    assert grpc_rss.floor.endswith(", empty grpc.aio server")
    assert grpc_rss.verdict == (
        "MISSED by 15.0 MiB: the target is below the Python floor (the floor misses it by 11.8 MiB)"
    )
    assert rows["peak RSS of sidecar-server"].floor == "15.0 MiB"


def test_the_pair_target_names_the_byte_relay_pair_when_measured() -> None:
    """Two byte relays in a row are about the least any pair on uvloop pays: the pair target's
    floor cell names their added p90 beside the httptools pair's, where they were measured;
    the verdict stays the httptools floor's."""
    report = _report()
    report.scenarios += [
        ("sidecar pair", 2, ["sidecar-client", "sidecar-server"]),
        ("nginx pair", 2, ["nginx-front", "nginx-proxy"]),
        (HTTPTOOLS_FLOOR_PAIR, 2, ["httptools-floor-front", "httptools-floor"]),
    ]
    report.paced["direct"] = Cell([_sample(20, 40, 100, 1000)])
    report.paced["sidecar pair"] = Cell([_sample(300, 400, 600, 1000)])
    report.paced["nginx pair"] = Cell([_sample(150, 200, 300, 1000)])
    report.paced[HTTPTOOLS_FLOOR_PAIR] = Cell([_sample(200, 290, 400, 1000)])

    def pair() -> Target:
        return {t.what.split(":")[0]: t for t in targets(report)}["pair at 1000 rps, added p90"]

    assert pair().floor == "250 µs (1.56x nginx), two in a row"
    report.paced[RELAY_FLOOR_PAIR] = Cell([_sample(150, 230, 300, 1000)])
    assert pair().floor == "250 µs (1.56x nginx), two in a row; two byte relays: 190 µs"
    assert pair().verdict.endswith(
        "the target is below the Python floor (the floor misses it by 42 µs)"
    )


def test_the_fixed_rate_table_splits_user_space_from_kernel_cpu() -> None:
    """CPU per request at 1000 rps is user + system time; the user-space part (the proxy's own
    code, what callgrind counts) gets its own column, "-" where the split was not recorded."""
    report = _report()
    split = Sample(150, 250, 400, 1000, 1000, 0, {"sidecar": 0.1}, {"sidecar": 0.06})
    report.paced["sidecar (outbound)"] = Cell([split])
    report.paced["nginx proxy"] = Cell([_sample(100, 140, 200, 1000, 0.05, "nginx-proxy")])
    text = render(report)
    assert "| sidecar (outbound) | 1,000 | 150 | 250 | 400 | - | 100 | 40 | 0 |" in text
    assert "| nginx proxy | 1,000 | 100 | 140 | 200 | - | 50 | - | 0 |" in text


def test_the_other_idle_mode_is_rendered_after_the_main_tables() -> None:
    """Both CPU idle modes are recorded: the second as its own section."""
    report = _report()
    report.other_idle = ("idle CPUs polling", _report())
    text = render(report)
    assert text.count("| sidecar (outbound) | 1 | 10,000 |") == 2
    assert "### The same rounds with idle CPUs polling" in text


def test_write_section_replaces_only_the_sidecar_section(tmp_path: Path) -> None:
    """The core section before and any section after stay byte for byte."""
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\n## Core library\n\ncore table\n\n## Sidecar\n\nold\n\n"
        "### old sub\n\nold rows\n\n## Cascade\n\ncascade table\n"
    )
    write_section(doc, render(_report()))
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\n## Core library\n\ncore table\n\n## Sidecar\n")
    assert text.endswith("\n## Cascade\n\ncascade table\n")
    assert "old rows" not in text
    assert text.count("## Sidecar") == 1
    assert "| sidecar (outbound) | 1 | 10,000 | 0.25x | 70 |" in text


def test_write_section_appends_when_absent(tmp_path: Path) -> None:
    """A doc without the section gets it at the end; a missing doc is created."""
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Core library\n\ncore\n")
    write_section(doc, "## Sidecar\n\nnew\n")
    assert doc.read_text() == "# Benchmarks\n\n## Core library\n\ncore\n\n## Sidecar\n\nnew\n"
    fresh = tmp_path / "new.md"
    write_section(fresh, "## Sidecar\n\nnew\n")
    assert fresh.read_text() == "# Benchmarks\n\n## Sidecar\n\nnew\n"


SERVING = (
    "_run_module_as_main (<frozen runpy>:198);_run_code (<frozen runpy>:88);"
    "<module> (cascadebreaker/sidecar/serve.py:77);main (cascadebreaker/sidecar/serve.py:31);"
    "serve (cascadebreaker/sidecar/serve.py:49);_run (cascadebreaker/sidecar/serve.py:73);"
)
# What py-spy recorded of `ccb sidecar` before it execs the serving process (samples after the
# exec are errors: py-spy still reads the old image): validating, and imports.
VALIDATING = "\n".join(
    [
        "<module> (ccb:6);main (cascadebreaker/cli.py:61);run_command "
        "(cascadebreaker/sidecar/command.py:51);load_config "
        "(cascadebreaker/sidecar/schema/__init__.py:40);model_dump (pydantic/main.py:9) 1",
        "<module> (ccb:6);main (cascadebreaker/cli.py:61);_find_and_load "
        "(<frozen importlib._bootstrap>:1176) 139",
    ]
)


def test_profile_summary_counts_self_and_inclusive_time() -> None:
    """Leaf frames give self time; start-up stacks and entry frames are left out."""
    raw = "\n".join(
        [
            SERVING + "a (cascadebreaker/sidecar/x.py:1);"
            "send (cascadebreaker/sidecar/upstream.py:9) 6",
            SERVING + "a (cascadebreaker/sidecar/x.py:2) 4",
            SERVING + "_find_and_load (<frozen importlib._bootstrap>:1) 90",
        ]
    )
    profile = summarise(raw)
    assert profile.samples == 10
    assert profile.self_top[0] == ("send (cascadebreaker/sidecar/upstream.py)", 0.6)
    assert dict(profile.inclusive_top) == {
        "a (cascadebreaker/sidecar/x.py)": 1.0,
        "send (cascadebreaker/sidecar/upstream.py)": 0.6,
    }


def test_profile_counts_only_the_serving_process() -> None:
    """Stacks of `ccb sidecar` validating its config before the exec are not the cost of
    serving: a profile of only those has no sample."""
    assert summarise(VALIDATING).samples == 0
    assert (
        summarise(VALIDATING + "\n" + SERVING + "a (cascadebreaker/sidecar/x.py:1) 5").samples == 5
    )


def test_a_profile_without_samples_fails_naming_the_cause() -> None:
    """py-spy's own count goes into the error: the empty table of the run it would have caught
    (py-spy sampled `ccb sidecar`, which then exec'd: 2 samples, 806 errors)."""
    log = "py-spy> Wrote raw flamegraph data to 'p.txt'. Samples: 141 Errors: 806\n"
    with pytest.raises(
        ProfileError, match=r"no sample of the serving sidecar.*Samples: 141 Errors: 806"
    ):
        from_py_spy(VALIDATING, log)
    profile = from_py_spy(SERVING + "a (cascadebreaker/sidecar/x.py:1) 5", "Samples: 5 Errors: 0")
    assert profile.samples == 5


def test_py_spy_spawns_the_serving_process_itself() -> None:
    """`ccb sidecar` validates, then execs the serving process: py-spy keeps reading the image it
    started with and samples nothing after the exec. So it spawns the serving module directly."""
    argv = serving_argv(7, Path("/tmp/profiled.yaml"))
    assert argv[1:5] == ["-m", "cascadebreaker.sidecar.serve", "7", "--config"]
    assert "sidecar" not in argv[1:4]


def test_a_profile_that_failed_is_named_not_rendered_as_an_empty_table() -> None:
    """The report says why there is no profile; it never prints a table of 0 samples."""
    report = _report()
    report.profile = Profile(0, [], [])
    text = render(report)
    assert "0 samples" not in text
    assert "not recorded" in text
    report.profile = None
    report.profile_error = "py-spy recorded no sample of the serving sidecar"
    text = render(report)
    assert "### Profile" in text
    assert "not recorded: py-spy recorded no sample of the serving sidecar" in text


def test_bench_discovers_the_suites() -> None:
    """`python -m bench` finds every bench/<name>/run.py; core runs first."""
    found = suites()
    assert "sidecar" in found
    if "core" in found:
        assert found[0] == "core"


def test_the_grpc_floor_is_a_handler_making_the_same_upstream_get() -> None:
    """Where the bare-GET handler was measured it is the gRPC floor: it adds 183 µs to the
    empty server where the target allows 60, so the sidecar's miss is below the floor."""
    report = _report()
    report.grpc[("empty grpc.aio server", 1)] = Cell([_sample(300, 400, 500, 3_000)])
    report.grpc[(GRPC_FETCH, 1)] = Cell([_sample(483, 600, 700, 2_500)])
    report.grpc[("sidecar Call", 1)] = Cell([_sample(570, 700, 800, 2_000)])
    row = {t.what.split(":")[0]: t for t in targets(report)}["gRPC Call p50, 1 conn"]
    assert row.verdict == (
        "MISSED by 210 µs: the target is below the Python floor (the floor misses it by 123 µs)"
    )
    assert row.floor == f"483 µs, {GRPC_FETCH}"


def test_cells_with_errors_are_named() -> None:
    """A floor that failed every call (0 calls/s) must not pass for a measurement: the run
    names it and exits 1 instead of writing its verdicts quietly."""
    report = _report()
    broken = _sample(0, 0, 0, 0)
    report.grpc[(GRPC_FETCH, 1)] = Cell([replace(broken, errors=8161)])
    assert failed_cells(report) == [f"{GRPC_FETCH} at 1 conns (gRPC): 8,161 errors"]
    assert failed_cells(_report()) == []


def test_the_compiled_sidecars_call_is_judged_beside_the_interpreted_one() -> None:
    """With the compiled build measured, its gRPC Call has its own row and verdict; without
    it, no row claims a compiled number."""
    report = _report()
    report.grpc[("empty grpc.aio server", 1)] = Cell([_sample(300, 400, 500, 3_000)])
    report.grpc[("sidecar Call", 1)] = Cell([_sample(400, 500, 600, 2_000)])
    rows = {t.what.split(":")[0]: t for t in targets(report)}
    assert "gRPC Call p50, 1 conn (compiled build)" not in rows
    report.grpc[("sidecar Call (compiled build)", 1)] = Cell([_sample(350, 450, 550, 2_400)])
    rows = {t.what.split(":")[0]: t for t in targets(report)}
    assert rows["gRPC Call p50, 1 conn"].verdict == "MISSED by 40 µs: ours (the floor meets it)"
    assert rows["gRPC Call p50, 1 conn (compiled build)"].verdict == "met"


def test_with_several_rounds_the_verdict_says_in_how_many_the_target_was_met() -> None:
    """Three rounds: the hop's median (60 µs) misses 2x nginx's 25 µs, but the first round's
    own numbers (40 µs) meet it: 'met in 1 of 3 rounds', a verdict within the run's noise.
    Memory, measured once a run, gets no count."""
    report = _report()
    report.wrk[("nginx proxy", 1)] = Cell([_sample(45, 50, 150, 20_000)] * 3)
    report.wrk[("direct", 1)] = Cell([_sample(20, 30, 100, 40_000)] * 3)
    report.wrk[("sidecar (outbound)", 1)] = Cell(
        [_sample(60, 90, 300, 10_000), _sample(80, 90, 300, 10_000), _sample(90, 90, 300, 10_000)]
    )
    report.wrk[("direct", 16)] = Cell([_sample(200, 300, 900, 60_000)] * 3)
    report.wrk[("sidecar (outbound)", 16)] = Cell([_sample(900, 1500, 3000, 48_000)] * 3)
    report.wrk[("nginx proxy", 16)] = Cell([_sample(300, 400, 900, 50_000)] * 3)
    verdicts = {t.what.split(":")[0]: t.verdict for t in targets(report)}
    assert verdicts["added p50 per hop, 1 conn"] == "MISSED by 10 µs; met in 1 of 3 rounds"
    assert verdicts["throughput at 16 conns"] == "met, in 3 of 3 rounds"
    assert verdicts["peak RSS of sidecar"] == "met"
    assert verdicts["pair at 1000 rps, added p90"] == "-"


def test_the_compiled_build_s_memory_is_judged_too() -> None:
    """The compiled processes (`--compiled`) carry their own RSS verdicts: the wheel that ships
    maps its native modules, ~1 MiB more than the interpreted sidecar."""
    report = _report()
    report.peak_rss_mb = {
        "sidecar-server": 29.2,
        "sidecar-server-compiled": 30.2,
        "sidecar-compiled": 47.0,
        "grpc-floor": 42.0,
        "httptools-floor": 23.4,
    }
    report.grpc_listeners = ("sidecar-compiled",)
    rows = {t.what.split(":")[0]: t for t in targets(report)}
    assert rows["peak RSS of sidecar-server"].verdict == "met"
    compiled = rows["peak RSS of sidecar-server (compiled build)"]
    assert compiled.measured.startswith("30.2 MiB")
    assert compiled.verdict == "MISSED by 0.2 MiB: ours (the floor meets it)"
    grpc = rows["peak RSS of sidecar (compiled build) (gRPC listener)"]
    assert grpc.floor.endswith(", empty grpc.aio server")


def test_the_verdicts_of_a_run_on_a_busy_host_are_marked() -> None:
    """Two runs whose every proxy's p90 was in milliseconds shared the host (0.11-0.15 CPUs of
    other processes); their verdicts read the host, and the report says so above them."""
    report = _report()
    assert "busy host" not in render(report)  # not measured: no claim either way
    report.other_cpus = 0.01
    assert "busy host" not in render(report)
    report.other_cpus = 0.11
    text = render(report)
    targets_at = text.index("### Targets")
    warning_at = text.index("**A busy host:** other processes")
    assert targets_at < warning_at < text.index("| target |")
    assert "used 0.11 CPUs on average during this run, at least 0.05" in text
