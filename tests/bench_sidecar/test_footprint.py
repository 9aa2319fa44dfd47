"""bench.sidecar.footprint reads callgrind's compressed output (measuring is the bench's)."""

from __future__ import annotations

from pathlib import Path

from bench.sidecar import footprint

# As callgrind writes it with --dump-instr=yes: names given once, then by id (the ids of `ob`
# and `cob` are one table, of `fn` and `cfn` another), addresses absolute, relative or `*`
# (the same), an instruction's Ir being how often it ran, and a call's line carrying its
# callee's inclusive cost (the call instruction's own run is on a line of its own).
OUT = """\
version: 1
positions: instr line
events: Ir
ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) object.c
fn=(1) PyObject_Free
0x1000 10 4
+4 * 4
+60 12 1
ob=(2) /tmp/t/src/abc__mypyc.cpython-311-x86_64-linux-gnu.so
fl=(2) native.c
fn=(2) CPyDef_proxy___exchange___ProxyExchange___start
0x20000 5 4
+8 6 4
cob=(1)
cfl=(1)
cfn=(1)
calls=4 0x1000 10
* * 1000
+2 * 4
-0x2 * 4
+4100 7 2
cob=(3) /usr/lib/libc.so.6
cfn=(3) memcpy
calls=2 0x9000 1
* * 50
ob=(3)
fl=(3) memcpy.S
fn=(3)
0x9000 1 2
"""


def _out(tmp_path: Path) -> Path:
    out = tmp_path / "callgrind.out"
    out.write_text(OUT)
    return out


def test_code_on_the_request_path_by_layer(tmp_path: Path) -> None:
    rows = {r.group: r for r in footprint.footprint(_out(tmp_path), 4)}  # 4 requests
    python = rows["CPython runtime (objects, calls, the interpreter)"]
    assert python.instructions == 9 / 4
    # 0x1000 and 0x1004 ran in every request; 0x1040 once in four: not on the path
    assert (python.lines, python.pages) == (1, 1)
    compiled = rows["compiled sidecar code (mypyc)"]
    assert compiled.instructions == (4 + 4 + 4 + 4 + 2) / 4  # the calls' lines not counted
    # 0x20000, 0x20008 (listed twice), 0x2000a in every request, 0x2100c in every second one:
    # all on the path (the bound is once every two requests), on two lines and two pages
    assert (compiled.lines, compiled.pages) == (2, 2)
    libc = rows["libc (memory, system call wrappers)"]
    assert (libc.instructions, libc.lines) == (0.5, 1)


def test_functions_are_named_as_in_callprofile(tmp_path: Path) -> None:
    top = footprint.by_function(_out(tmp_path), 4, 2)
    assert [f.group for f in top] == [
        "proxy.exchange.ProxyExchange.start (compiled sidecar code)",
        "PyObject_Free (CPython runtime)",
    ]


def test_the_table_sums_the_layers() -> None:
    rows = [
        footprint.Footprint("a", 10.0, 3, 2),
        footprint.Footprint("b", 5.0, 1, 1),
    ]
    table = footprint.render(rows, "x", 100)
    assert table[-1] == "| **per request** | 15 | 4 | 0.2 | 3 |"


# As callgrind writes it with its cache simulator (no --dump-instr): one position (the line),
# then every event; a call's line carries its callee's inclusive cost.
COLD = """\
version: 1
positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) object.c
fn=(1) PyObject_Free
10 40 10 5 3 2 1 3 2 1
+2 8 2 0 1 0 0 1 0 0
ob=(2) /tmp/t/src/abc__mypyc.cpython-311-x86_64-linux-gnu.so
fl=(2) native.c
fn=(2) CPyDef_proxy___exchange___ProxyExchange___start
5 30 6 4 6 1 2 6 1 2
cob=(1)
cfl=(1)
cfn=(1)
calls=1 10
* 48 12 5 4 2 1 4 2 1
* 2 0 0 1 0 0 1 0 0
fn=(1)
20 4 1 1 1 0 1 1 0 1
"""


def _cold(tmp_path: Path) -> Path:
    out = tmp_path / "callgrind.out"
    out.write_text(COLD)
    return out


def test_first_touches_by_layer_and_function(tmp_path: Path) -> None:
    costs = footprint.own_events(_cold(tmp_path))
    python = costs[("/usr/lib/libpython3.11.so.1.0", "PyObject_Free")]
    assert (python["Ir"], python["I1mr"], python["D1mr"] + python["D1mw"]) == (48, 4, 3)
    compiled = costs[
        (
            "/tmp/t/src/abc__mypyc.cpython-311-x86_64-linux-gnu.so",
            "CPyDef_proxy___exchange___ProxyExchange___start",
        )
    ]
    # the call's line (its callee's inclusive cost) is not the caller's own
    assert (compiled["Ir"], compiled["I1mr"], compiled["D1mr"], compiled["D1mw"]) == (32, 7, 1, 2)
    # `fn=(1)` under `ob=(2)`: code of that object named by an id given before
    inlined = costs[("/tmp/t/src/abc__mypyc.cpython-311-x86_64-linux-gnu.so", "PyObject_Free")]
    assert (inlined["Ir"], inlined["I1mr"], inlined["D1mw"]) == (4, 1, 1)
    layers, functions = footprint.first_touches(costs, 2)
    rows = {r.group: r for r in layers}
    assert rows["compiled sidecar code (mypyc)"] == footprint.Touched(
        "compiled sidecar code (mypyc)", 36, 8, 4
    )
    assert rows["CPython runtime (objects, calls, the interpreter)"].code_lines == 4
    assert [f.group for f in functions] == [
        "proxy.exchange.ProxyExchange.start (compiled sidecar code)",
        "PyObject_Free (CPython runtime)",
    ]


def test_the_quietest_window_counts() -> None:
    busy = {("a", "f"): {"Ir": 900, "I1mr": 90}, ("b", "tick"): {"Ir": 500, "I1mr": 50}}
    quiet = {("a", "f"): {"Ir": 900, "I1mr": 90}}
    assert footprint.quietest([busy, quiet, busy]) is quiet


def test_the_cold_table_sums_code_and_data() -> None:
    rows = [footprint.Touched("a", 100, 10, 6), footprint.Touched("b", 50, 4, 12)]
    table = footprint.render_cold(rows, "x")
    assert table[-1] == "| **one request** | 150 | 14 | 18 | 2.0 |"
