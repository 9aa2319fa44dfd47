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
