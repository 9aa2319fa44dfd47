"""The compiled build's shared library itself: collected only under scripts/test-compiled
(CCB_EXPECT_COMPILED=1, tests/compiled/conftest.py), where the compiled modules are loaded."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def imported_symbols(library: Path, kind: str) -> list[str]:
    """The symbols a shared library takes from others by relocations of `kind`: JUMP_SLOT, the
    functions it calls through its PLT; GLOB_DAT, those whose address it reads from its GOT
    (data, and functions called without a PLT)."""
    readelf = shutil.which("readelf")
    assert readelf, "readelf (binutils) is needed"
    listing = subprocess.run([readelf, "-rW", str(library)], capture_output=True, text=True)
    listing.check_returncode()
    return [
        line.split()[4].split("@")[0]
        for line in listing.stdout.splitlines()
        if f"R_X86_64_{kind} " in line and len(line.split()) > 4
    ]


def plt_symbols(library: Path) -> list[str]:
    """The functions a shared library calls through its PLT (its JUMP_SLOT relocations)."""
    return imported_symbols(library, "JUMP_SLOT")


def _library() -> Path:
    import cascadebreaker

    site = Path(cascadebreaker.__file__).resolve().parents[1]
    (library,) = site.glob("*__mypyc.*.so")
    return library


def exported_symbols(library: Path) -> list[str]:
    """The symbols a shared library defines for others (its dynamic symbol table's defined
    global ones)."""
    readelf = shutil.which("readelf")
    assert readelf, "readelf (binutils) is needed"
    listing = subprocess.run(
        [readelf, "--dyn-syms", "-W", str(library)], capture_output=True, text=True
    )
    listing.check_returncode()
    return [
        fields[7].split("@")[0]
        for fields in (line.split() for line in listing.stdout.splitlines())
        if len(fields) > 7 and fields[4] in ("GLOBAL", "WEAK") and fields[6] != "UND"
    ]


def test_the_library_exports_its_module_init_alone() -> None:
    """Compiled with hidden visibility (hatch_build.py): the dynamic symbol table holds the
    module's `PyInit_` and nothing else, so the loader reads ~180 KB less (the exported CPyDef_*
    names and their hash table were resident in every sidecar) and references between compiled
    functions and globals need no GOT entry."""
    import cascadebreaker

    site = Path(cascadebreaker.__file__).resolve().parents[1]
    (library,) = site.glob("*__mypyc.*.so")
    exported = exported_symbols(library)
    assert [s for s in exported if s.startswith("PyInit_")] == [
        f"PyInit_{library.name.split('.')[0]}"
    ]
    assert [s for s in exported if not s.startswith("PyInit_") and not s.startswith("_")] == []


def test_compiled_calls_stay_inside_the_library() -> None:
    """hatch_build.py compiles the mypyc build with local calls: its functions call one another
    and mypyc's runtime library (CPyDef_*, CPy*) directly, neither through the PLT nor the GOT;
    only libpython and libc are imported (without the flags, test_build_hook.py's two small
    modules alone have dozens of CPy slots)."""
    library = _library()
    symbols = imported_symbols(library, "JUMP_SLOT") + imported_symbols(library, "GLOB_DAT")
    assert any(s.startswith("Py") for s in symbols)  # the listing was read: libpython is there
    assert [s for s in symbols if s.startswith("CPy")] == []


def test_the_library_calls_libpython_without_a_plt() -> None:
    """Compiled with `-fno-plt` (hatch_build.py): a call to libpython or libc loads the
    function's address from the GOT, with no PLT stub between (a 16-byte stub per function
    called, ~60 of them touched per request: 15 fewer cache lines of code from cold)."""
    library = _library()
    assert plt_symbols(library) == []
    called = imported_symbols(library, "GLOB_DAT")
    assert "PyObject_GetAttr" in called and "PyBytes_FromStringAndSize" in called
