"""Building the image offline with podman: a Debian base from mmdebstrap, a host-made wheelhouse.

No image registry is reachable here, so the base is built from Debian packages
(deploy/offline-base.sh) and cached under a tag named after the script's hash: the same recipe
gives the same base, as a pulled tag would (CCB_REBUILD_BASE=1 rebuilds it). The package index
is reached from the host only: the host's Debian python3 (the base's interpreter, same version,
so environment markers agree) builds a wheelhouse that the Dockerfile installs with --no-index.
With CCB_COMPILED_WHEEL set (.ci/run sets it to scripts/build-compiled's wheel), that wheel
replaces the pure-Python one in the wheelhouse: the image's sidecar is the compiled build.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/cascadebreaker:test"
HOST_PYTHON = "/usr/bin/python3"  # Debian's, like the base image's
TOOLS = ("podman", "runc", "mmdebstrap", "kubectl")

# podman on these machines: runc (crun refuses this host's hybrid cgroups) and lower ulimits.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
"""


def require_podman() -> None:
    """Fail under CI, skip elsewhere, when the image cannot be built and run here."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not Path(HOST_PYTHON).exists():
        missing.append(HOST_PYTHON)
    if os.geteuid() != 0:
        missing.append("root")
    if missing:
        message = f"the image tests need {', '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI must not skip them (see .ci/run)")
        pytest.skip(message)


def podman_env() -> dict[str, str]:
    """The environment for podman commands: our containers.conf, nothing machine-wide changed."""
    conf = Path(tempfile.gettempdir()) / "ccb-tests-containers.conf"
    if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
        conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def podman(*args: str, timeout: float = 600, check: bool = True) -> str:
    """Run podman; its stdout (AssertionError with stderr when it fails and check)."""
    done = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=podman_env(),
        check=False,
    )
    if check:
        assert done.returncode == 0, f"podman {' '.join(args)}: {done.stderr[-3000:]}"
    return done.stdout


@dataclass
class BuiltImage:
    """What the build produced and what it cost."""

    tag: str
    base: str
    size_bytes: int
    base_seconds: float  # 0 when the cached base was used
    build_seconds: float
    compiled: bool  # the compiled wheel (CCB_COMPILED_WHEEL) is what it installed


COMPILED_WHEEL = "CCB_COMPILED_WHEEL"


def compiled_wheel() -> Path | None:
    """The compiled wheel to ship in the image, when one is given (under CI it must be)."""
    value = os.environ.get(COMPILED_WHEEL, "")
    if not value:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{COMPILED_WHEEL} is not set: .ci/run builds the image's compiled wheel")
        return None
    wheel = Path(value)
    assert wheel.is_file(), f"{COMPILED_WHEEL}={value}: no such file"
    assert not wheel.name.endswith("-none-any.whl"), f"{COMPILED_WHEEL}={value} is pure Python"
    return wheel


def base_tag() -> str:
    recipe = (ROOT / "deploy" / "offline-base.sh").read_bytes()
    return f"localhost/ccb-base:bookworm-{hashlib.sha256(recipe).hexdigest()[:12]}"


def ensure_base() -> tuple[str, float]:
    """The base image's tag, built now unless cached; and the seconds spent.

    Under a lock: .ci/run starts building the base beside the first tiers (it takes minutes
    and mostly waits on the archive), and the image fixture then waits for that build."""
    with (Path(tempfile.gettempdir()) / "ccb-base-image.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_base()


def _ensure_base() -> tuple[str, float]:
    tag = base_tag()
    exists = (
        subprocess.run(["podman", "image", "exists", tag], env=podman_env(), check=False).returncode
        == 0
    )
    if exists and os.environ.get("CCB_REBUILD_BASE") != "1":
        return tag, 0.0
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(ROOT / "deploy" / "offline-base.sh"), tag],
        capture_output=True,
        text=True,
        timeout=900,
        env=podman_env(),
        check=False,
    )
    assert done.returncode == 0, f"offline-base.sh: {done.stderr[-3000:]}"
    return tag, time.monotonic() - started


def _python_version(argv: list[str]) -> str:
    code = "import platform; print(platform.python_version())"
    return subprocess.run(
        [*argv, "-c", code], capture_output=True, text=True, check=True, env=podman_env()
    ).stdout.strip()


def build_image() -> BuiltImage:
    """Build IMAGE from deploy/Dockerfile on the offline base."""
    base, base_seconds = ensure_base()
    started = time.monotonic()
    in_base = _python_version(["podman", "run", "--rm", "--network", "none", base, "python3"])
    on_host = _python_version([HOST_PYTHON])
    assert in_base == on_host, f"base has Python {in_base}, {HOST_PYTHON} is {on_host}"
    with tempfile.TemporaryDirectory(prefix="ccb-image-") as context:
        ctx = Path(context)
        for name in ("pyproject.toml", "README.md", "hatch_build.py", ".dockerignore"):
            shutil.copy(ROOT / name, ctx / name)
        shutil.copytree(ROOT / "src", ctx / "src", ignore=shutil.ignore_patterns("__pycache__"))
        wheels = subprocess.run(
            [
                HOST_PYTHON,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--wheel-dir",
                str(ctx / "wheelhouse"),
                f"{ctx}[sidecar,demo-apps]",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert wheels.returncode == 0, f"pip wheel: {wheels.stderr[-3000:]}"
        compiled = compiled_wheel()
        if compiled is not None:  # the one cascadebreaker wheel pip can pick
            for pure in (ctx / "wheelhouse").glob("cascadebreaker-*.whl"):
                pure.unlink()
            shutil.copy(compiled, ctx / "wheelhouse" / compiled.name)
        podman(
            "build",
            "--network",
            "none",
            "--build-arg",
            f"BASE_IMAGE={base}",
            "-f",
            str(ROOT / "deploy" / "Dockerfile"),
            "-t",
            IMAGE,
            str(ctx),
            timeout=900,
        )
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).strip())
    took = time.monotonic() - started
    return BuiltImage(IMAGE, base, size, base_seconds, took, compiled is not None)


if __name__ == "__main__":
    # .ci/run builds the base ahead of the tests: `python tests/deploy/image.py`.
    tag, seconds = ensure_base()
    print(f"base image {tag}: {seconds:.0f} s (0 = cached)")
