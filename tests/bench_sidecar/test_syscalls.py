"""bench/sidecar/syscalls.py: `strace -c` summaries read into calls per request."""

from __future__ import annotations

from bench.sidecar.syscalls import parse_summary, render

SUMMARY = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 54.77    0.029141           7      4000           write
 23.47    0.012487           3      4005           epoll_pwait
 21.76    0.011576           2      4000           read
  0.04    0.000021          21         1         1 connect
  0.00    0.000001           0         3           getsockname
------ ----------- ----------- --------- --------- ----------------
100.00    0.053209           4     12013         1 total
"""


def test_every_system_call_is_counted_with_its_failed_calls_and_the_total_left_out() -> None:
    assert parse_summary(SUMMARY) == {
        "write": 4000,
        "epoll_pwait": 4005,
        "read": 4000,
        "connect": 1,
        "getsockname": 3,
    }


def test_a_summary_without_rows_reads_as_nothing_counted() -> None:
    assert parse_summary("strace: Process 1 attached\n") == {}


def test_the_table_keeps_calls_made_at_least_every_other_request_and_totals_all() -> None:
    rows = [
        ("sidecar", {"read": 2.0, "write": 2.0, "getsockname": 0.001}),
        ("nginx proxy", {"recvfrom": 2.0, "writev": 2.0, "getsockopt": 1.0}),
    ]
    lines = render(rows, 100)
    assert lines[2] == "| proxy | getsockopt | read | recvfrom | write | writev | all |"
    assert lines[4] == "| sidecar | 0.00 | 2.00 | 0.00 | 2.00 | 0.00 | 4.00 |"
    assert lines[5] == "| nginx proxy | 1.00 | 0.00 | 2.00 | 0.00 | 2.00 | 5.00 |"


def test_the_grpc_table_counts_per_call_by_server() -> None:
    lines = render([("sidecar Call", {"read": 3.4, "write": 7.0})], 10, "gRPC Call", "server")
    assert lines[0] == "system calls per gRPC Call (strace -c, n=10):"
    assert lines[2] == "| server | read | write | all |"
    assert lines[4] == "| sidecar Call | 3.40 | 7.00 | 10.40 |"
