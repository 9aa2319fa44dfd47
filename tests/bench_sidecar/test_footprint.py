"""bench.sidecar.footprint reads callgrind's compressed output (measuring is the bench's)."""

from __future__ import annotations

from pathlib import Path

from bench.sidecar import footprint

# As callgrind writes it with --dump-instr=yes: names given once, then by id (the ids of `ob`
# and `cob` are one table), addresses absolute, relative or `*` (the same), and a call's line
# carrying its callee's inclusive cost.
OUT = """\
version: 1
positions: instr line
events: Ir
ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) object.c
fn=(1) PyObject_Free
0x1000 10 3
+4 * 2
+60 12 1
ob=(2) /tmp/t/src/abc__mypyc.cpython-311-x86_64-linux-gnu.so
fl=(2) native.c
fn=(2) CPyDef_proxy___exchange___ProxyExchange___start
0x20000 5 4
cob=(1)
cfl=(1)
cfn=(1)
calls=1 0x1000 10
+8 6 1000
+2 * 1
-0x2 * 1
cob=(3) /usr/lib/libc.so.6
cfn=(3) memcpy
calls=1 0x9000 1
+4100 7 50
ob=(3)
fl=(3) memcpy.S
fn=(3)
0x9000 1 5
"""


def test_code_lines_pages_and_instructions_by_layer(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.out"
    out.write_text(OUT)
    rows = {r.group: r for r in footprint.footprint(out, 1)}
    python = rows["CPython runtime (objects, calls, the interpreter)"]
    assert python.instructions == 6  # 3 + 2 + 1
    assert (python.lines, python.pages) == (2, 1)  # 0x1000, 0x1004 | 0x1040
    compiled = rows["compiled sidecar code (mypyc)"]
    assert compiled.instructions == 4 + 1 + 1  # the calls' lines are their callees' cost
    # 0x20000; the call sites 0x20008 and (+4100) 0x2100e; 0x2000a and (-2) 0x20008 again
    assert (compiled.lines, compiled.pages) == (2, 2)
    libc = rows["libc (memory, system call wrappers)"]
    assert (libc.instructions, libc.lines) == (5, 1)


def test_the_table_sums_the_layers() -> None:
    rows = [
        footprint.Footprint("a", 10.0, 3, 2),
        footprint.Footprint("b", 5.0, 1, 1),
    ]
    table = footprint.render(rows, "x", 100)
    assert table[-1] == "| **per request** | 15 | 4 | 0.2 | 3 |"
