"""hatch_build.py: the mypyc build's local-call flags (the compiled library itself is checked
by test_compiled_modules.py under scripts/test-compiled)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPILE = "-fno-semantic-interposition -fvisibility=hidden -fno-plt"
LINK = "-Wl,-Bsymbolic-functions"


def _hook_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _hook_module()


def test_the_hook_runs_before_mypyc_in_the_wheel_build() -> None:
    # hatchling runs a target's hooks in the order pyproject.toml names them; mypyc compiles in
    # its initialize, so the flags must be in os.environ by then.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hooks = list(config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"])
    assert hooks.index("custom") < hooks.index("mypyc")


def test_the_flags_are_added_to_the_users_once() -> None:
    given = {"CFLAGS": "-O2 -march=x86-64-v2", "LDFLAGS": "-L/opt/lib"}
    flags = hook.local_call_flags(given, ("custom", "mypyc"), "linux")
    assert flags == {"CFLAGS": f"-O2 -march=x86-64-v2 {COMPILE}", "LDFLAGS": f"-L/opt/lib {LINK}"}
    assert hook.local_call_flags(flags, ("custom", "mypyc"), "linux") == flags
    assert hook.local_call_flags({}, ("mypyc",), "linux") == {"CFLAGS": COMPILE, "LDFLAGS": LINK}


@pytest.mark.parametrize(
    ("environ", "hooks", "platform"),
    [
        ({}, ("custom",), "linux"),  # pure-Python wheel or editable install: nothing compiles
        ({}, ("custom", "mypyc"), "darwin"),  # Apple's linker has no -Bsymbolic-functions
        ({"CCB_BUILD_LOCAL_CALLS": "0"}, ("custom", "mypyc"), "linux"),  # switched off
    ],
)
def test_the_environment_is_left_alone(
    environ: dict[str, str], hooks: tuple[str, ...], platform: str
) -> None:
    assert hook.local_call_flags(environ, hooks, platform) == {}


def test_the_hook_sets_the_flags_for_the_build_and_restores_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CFLAGS", "-O2")
    monkeypatch.delenv("LDFLAGS", raising=False)
    monkeypatch.delenv("CCB_BUILD_LOCAL_CALLS", raising=False)
    monkeypatch.setattr(hook.sys, "platform", "linux")
    plugin = hook.LocalCallsHook(str(tmp_path), {}, None, None, str(tmp_path), "wheel")
    build_data = {"build_hooks": ("custom", "mypyc")}
    plugin.initialize("standard", build_data)
    seen = (os.environ["CFLAGS"], os.environ["LDFLAGS"])
    plugin.finalize("standard", build_data, str(tmp_path / "a.whl"))
    assert seen == (f"-O2 {COMPILE}", LINK)
    assert os.environ["CFLAGS"] == "-O2" and "LDFLAGS" not in os.environ


TINY_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
[project]
name = "tinypkg"
version = "0.1"
[tool.hatch.build.targets.wheel]
packages = ["src/tinypkg"]
[tool.hatch.build.targets.wheel.hooks.custom]
[tool.hatch.build.targets.wheel.hooks.mypyc]
enable-by-default = false
include = ["/src/tinypkg/a.py", "/src/tinypkg/b.py"]
"""


def _build_tiny(project: Path, out: Path, local_calls: str) -> list[str]:
    """A real mypyc wheel of two modules (one calls the other) through this project's hook;
    the CPy* functions its shared library imports (called through the PLT or the GOT)."""
    from tests.compiled.test_compiled_library import imported_symbols

    env = {**os.environ, "HATCH_BUILD_HOOK_ENABLE_MYPYC": "1", "CCB_BUILD_LOCAL_CALLS": local_calls}
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip, "-w", str(out), str(project)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("tinypkg-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(out / "tree")
    (library,) = (out / "tree").glob("*__mypyc.*.so")
    imported = imported_symbols(library, "JUMP_SLOT") + imported_symbols(library, "GLOB_DAT")
    return [s for s in imported if s.startswith("CPy")]


def test_a_real_mypyc_build_gets_local_calls_and_the_switch_turns_them_off(
    tmp_path: Path,
) -> None:
    assert shutil.which("gcc"), "gcc is needed (the compiled build needs it too)"
    package = tmp_path / "tiny" / "src" / "tinypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def g(x: int) -> int:\n    return x * 3 + 1\n")
    (package / "b.py").write_text(
        "from tinypkg.a import g\n\n\ndef h(n: int) -> int:\n    return g(n) + 1\n"
    )
    (tmp_path / "tiny" / "pyproject.toml").write_text(TINY_PYPROJECT)
    shutil.copy(ROOT / "hatch_build.py", tmp_path / "tiny" / "hatch_build.py")
    assert _build_tiny(tmp_path / "tiny", tmp_path / "on", "1") == []
    from tests.compiled.test_compiled_library import exported_symbols, plt_symbols

    (library,) = (tmp_path / "on" / "tree").glob("*__mypyc.*.so")
    exported = [s for s in exported_symbols(library) if not s.startswith("_")]
    assert exported == [f"PyInit_{library.name.split('.')[0]}"]  # hidden: the init alone
    assert plt_symbols(library) == []  # -fno-plt: libpython's functions through the GOT
    assert _build_tiny(tmp_path / "tiny", tmp_path / "off", "0")  # mypyc's runtime, via the PLT
    (library,) = (tmp_path / "off" / "tree").glob("*__mypyc.*.so")
    assert len(exported_symbols(library)) > 10  # every CPyDef_ and CPy function exported
    assert any(s.startswith("Py") for s in plt_symbols(library))
