"""The PGO build's steps and the comparison's table (building the wheel and measuring it are
scripts/test-compiled's and the benchmark's; these check the pieces that decide them)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from bench.sidecar import mypyc_trial, pgo
from bench.sidecar.pgo import in_turn, render


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


def _object(tmp_path: Path, source: str) -> Path:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed (scripts/test-compiled needs it too)"
    c = tmp_path / "unit.c"
    c.write_text(source)
    subprocess.run([gcc, "-O2", "-c", str(c), "-o", str(tmp_path / "unit.o")], check=True)
    return tmp_path / "unit.o"


def test_hot_text_is_measured_in_a_real_object_file(tmp_path: Path) -> None:
    hot = _object(tmp_path, "__attribute__((hot)) int f(int x) { return x * 3 + 1; }\n")
    assert pgo.hot_text_bytes(hot) > 0
    plain = _object(tmp_path, "int f(int x) { return x * 3 + 1; }\n")
    assert pgo.hot_text_bytes(plain) == 0


def test_each_build_is_in_the_same_fresh_directory_with_the_users_cflags_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], dict[str, str]]] = []

    def fake_build(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
        assert not any(Path(env["HATCH_MYPYC_BUILD_DIR"]).iterdir())  # made afresh
        seen.append((argv, env))
        out = Path(argv[argv.index("-w") + 1])
        out.mkdir(exist_ok=True)
        (out / "cascadebreaker-0.1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"")

    monkeypatch.setattr(mypyc_trial, "run_build", fake_build)
    monkeypatch.setenv("CFLAGS", "-march=x86-64-v2")
    monkeypatch.setenv("LDFLAGS", "-L/opt/lib")
    build_dir = tmp_path / "build"
    for flags in ("-fprofile-generate", "-fprofile-use"):
        (build_dir / "left-over").mkdir(parents=True, exist_ok=True)
        pgo.hook_wheel(tmp_path / "project", build_dir, tmp_path / "out", flags)
    (first, env1), (_, env2) = seen
    assert env1["HATCH_MYPYC_BUILD_DIR"] == env2["HATCH_MYPYC_BUILD_DIR"] == str(build_dir)
    assert env1["CFLAGS"] == "-march=x86-64-v2 -fprofile-generate"
    assert env2["CFLAGS"] == "-march=x86-64-v2 -fprofile-use"
    # The local-call flags are the build hook's (hatch_build.py), as in a user's own build.
    assert "LDFLAGS" not in env1 and "CCB_BUILD_LOCAL_CALLS" not in env1
    assert env1["HATCH_BUILD_HOOK_ENABLE_MYPYC"] == "1"
    # The venv's mypyc, at a fixed path: from pip's random build env the profiled build fails.
    assert "--no-build-isolation" in first


def _fake_steps(
    monkeypatch: pytest.MonkeyPatch, *, profile: bool, hot: int, stale: bool = False
) -> None:
    def fake_wheel(project: Path, build_dir: Path, out: Path, cflags: str) -> Path:
        build_dir.mkdir(parents=True, exist_ok=True)
        (build_dir / "native.o").write_bytes(b"")
        out.mkdir(parents=True, exist_ok=True)
        wheel = out / "cascadebreaker-0.1.0-cp311-cp311-linux_x86_64.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.comment = cflags.encode()
            runtime = b"__gcov_merge_add" if "generate" in cflags or stale else b""
            archive.writestr("cascadebreaker/permit.cpython-311-x86_64-linux-gnu.so", runtime)
        return wheel

    def fake_train(tree: Path, workdir: Path) -> None:
        if profile:
            gcda = workdir / "profile" / "tmp" / "build" / "native.gcda"  # nested, as gcc 12 does
            gcda.parent.mkdir(parents=True)
            gcda.write_bytes(b"")

    monkeypatch.setattr(mypyc_trial, "copy_project", lambda project: project)
    monkeypatch.setattr(mypyc_trial, "unpack", lambda wheel, tree: tree)
    monkeypatch.setattr(pgo, "hook_wheel", fake_wheel)
    monkeypatch.setattr(pgo, "train", fake_train)
    monkeypatch.setattr(pgo, "hot_text_bytes", lambda obj: hot)


def test_the_wheel_is_the_one_built_with_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_steps(monkeypatch, profile=True, hot=4096)
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "cascadebreaker-0.0.9-py3-none-any.whl").write_bytes(b"older")
    wheel = pgo.build_wheel(tmp_path / "work", tmp_path / "dist")
    assert wheel.parent == tmp_path / "dist"
    assert _cflags(wheel).startswith("-fprofile-use")
    assert (tmp_path / "dist" / "cascadebreaker-0.0.9-py3-none-any.whl").exists()  # kept


@pytest.mark.parametrize(
    ("profile", "hot", "stale", "refusal"),
    [
        (False, 4096, False, "wrote no profile"),  # the training wrote no .gcda
        (True, 0, False, "was not used"),  # gcc found no profile it could use
        (True, 4096, True, r"ships instrumented code: .*permit"),  # a stale module left in
    ],
)
def test_a_build_that_is_not_what_was_promised_fails_and_delivers_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    profile: bool,
    hot: int,
    stale: bool,
    refusal: str,
) -> None:
    _fake_steps(monkeypatch, profile=profile, hot=hot, stale=stale)
    with pytest.raises(RuntimeError, match=refusal):
        pgo.build_wheel(tmp_path / "work", tmp_path / "dist")
    assert not (tmp_path / "dist").exists()


def test_the_tree_the_benchmark_measures_is_unpacked_from_that_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_steps(monkeypatch, profile=True, hot=4096)
    unpacked: list[tuple[Path, Path]] = []
    monkeypatch.setattr(mypyc_trial, "unpack", lambda w, t: unpacked.append((w, t)) or t)
    tree = pgo.build(tmp_path / "compiled")
    (instrumented, _), (wheel, last) = unpacked
    assert _cflags(instrumented).startswith("-fprofile-generate")
    assert tree == last
    assert _cflags(wheel).startswith("-fprofile-use")


def _cflags(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.comment.decode()


def test_each_tree_is_measured_first_in_turn_over_the_rounds() -> None:
    orders = [in_turn(["a", "b", "c"], r) for r in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert in_turn(["only"], 5) == ["only"]
