"""The checked-in generated code matches what scripts/gen-proto makes from the .proto today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "src" / "cascadebreaker" / "sidecar" / "grpc" / "proto_gen"
FILES = ("__init__.py", "sidecar_pb2.py", "sidecar_pb2.pyi", "sidecar_pb2_grpc.py")


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    """Regenerate into a temp dir and compare byte for byte with the checked-in files."""
    venv = Path(sys.executable).parent.parent
    subprocess.run(
        [str(ROOT / "scripts" / "gen-proto"), "--out", str(tmp_path)],
        check=True,
        env={"VENV": str(venv), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=60,
    )
    stale = [
        name for name in FILES if (tmp_path / name).read_bytes() != (GENERATED / name).read_bytes()
    ]
    assert not stale, (
        f"run scripts/gen-proto (grpcio-tools as pinned in pyproject.toml): {stale} differ from"
        " proto/ccb/v1/sidecar.proto"
    )


def test_generated_modules_import_as_a_package() -> None:
    """The rewritten relative import works: the stubs module finds the messages."""
    from cascadebreaker.sidecar.grpc.proto_gen import sidecar_pb2, sidecar_pb2_grpc

    request = sidecar_pb2.CallRequest(upstream="payment", path="/v1/charges")
    assert sidecar_pb2.CallRequest.FromString(request.SerializeToString()) == request
    assert hasattr(sidecar_pb2_grpc, "SidecarStub")
