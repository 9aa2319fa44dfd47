"""Build hook: the compiled build's calls stay inside its shared library (local calls).

Runs before the opt-in mypyc hook (pyproject.toml) and only when that hook runs, on Linux:
gcc then compiles with `-fno-semantic-interposition` and links with `-Wl,-Bsymbolic-functions`,
so the compiled modules call one another and mypyc's runtime library directly, not through the
PLT, and may inline those calls (no one interposes mypyc's symbols; an extension module is
loaded RTLD_LOCAL anyway). Measured: -3.6 % instructions per request, the pair's p90 at
1000 rps -20 % (docs/benchmarks.md, "Local calls"). It also compiles with `-fvisibility=hidden`:
the library exports its `PyInit_` alone (CPython's `PyMODINIT_FUNC` keeps it visible; mypyc's
per-module shims reach the rest through capsules), so its ~2,600 other dynamic symbols, their
names and hash table (~180 KB the loader kept resident in every sidecar) are gone, and
references to compiled globals need no GOT entry (-23 cache lines per request from cold). And
with `-fno-plt`: a call to libpython or libc loads the function's address from the GOT instead
of jumping through a 16-byte PLT stub (the ~60 stubs a request touched: -15 cache lines of code
per request from cold, docs/benchmarks.md "No PLT"). A plain
`HATCH_BUILD_HOOK_ENABLE_MYPYC=1 pip wheel .` gets them as `scripts/build-compiled` does;
`CCB_BUILD_LOCAL_CALLS=0` builds without them (to measure what they give).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

COMPILE_FLAGS = ("-fno-semantic-interposition", "-fvisibility=hidden", "-fno-plt")
LINK_FLAGS = ("-Wl,-Bsymbolic-functions",)
OFF_SWITCH = "CCB_BUILD_LOCAL_CALLS"


def local_call_flags(
    environ: Mapping[str, str], hooks: Iterable[str], platform: str
) -> dict[str, str]:
    """The CFLAGS and LDFLAGS to build with (the user's, ours added once), or {} to leave the
    environment as it is: no mypyc build, not Linux (macOS's linker has no -Bsymbolic), or
    switched off."""
    if "mypyc" not in hooks or not platform.startswith("linux"):
        return {}
    if environ.get(OFF_SWITCH, "1").strip() == "0":
        return {}
    flags = {}
    for name, ours in (("CFLAGS", COMPILE_FLAGS), ("LDFLAGS", LINK_FLAGS)):
        given = environ.get(name, "")
        words = given.split()
        flags[name] = " ".join([given, *(f for f in ours if f not in words)]).strip()
    return flags


class LocalCallsHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        # The mypyc hook compiles in its own initialize, after this one, from os.environ.
        flags = local_call_flags(os.environ, build_data.get("build_hooks", ()), sys.platform)
        self._saved = {name: os.environ.get(name) for name in flags}
        os.environ.update(flags)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        for name, value in getattr(self, "_saved", {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
