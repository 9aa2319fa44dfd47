"""Command-line sources: admin URLs checked, the demo's state file read, nothing is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from cascadebreaker.cli import main
from cascadebreaker.dashboard.sources import SourceError, admin_url, from_arguments
from cascadebreaker.demo.control import write_state
from cascadebreaker.demo.topology import Mode, Topology


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("http://127.0.0.1:15000", "http://127.0.0.1:15000"),
        (" http://127.0.0.1:15000/ ", "http://127.0.0.1:15000"),
        ("https://pay.svc:8443/admin/", "https://pay.svc:8443/admin"),
    ],
)
def test_admin_urls_are_normalised(text: str, url: str) -> None:
    assert admin_url(text) == url


@pytest.mark.parametrize("text", ["127.0.0.1:15000", "ftp://x:1", "http://", "http://h:port"])
def test_bad_admin_urls_are_named(text: str) -> None:
    with pytest.raises(SourceError, match="--sidecar"):
        admin_url(text)


def test_nothing_to_show_is_an_error() -> None:
    with pytest.raises(SourceError, match="nothing to show"):
        from_arguments([], demo=False, redis=None, namespace="ccb")


def test_a_bad_redis_url_is_named() -> None:
    with pytest.raises(SourceError, match="--redis"):
        from_arguments([], demo=False, redis="localhost:6379", namespace="ccb")


def test_the_demo_state_file_gives_every_sidecar_service_and_fault_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CCB_DEMO_STATE", str(tmp_path / "state.json"))
    topology = Topology.allocate(Mode.SIDECAR)
    write_state(topology, {}, tmp_path)  # this process is the "launcher": alive

    sources = from_arguments(["http://127.0.0.1:9/"], demo=True, redis=None, namespace="ccb")

    assert len(sources.services) == 8  # recommendations too: a soft dependency
    assert sorted(s for s in sources.sidecars.values() if s) == [
        "gateway",
        "inventory",
        "order",
        "payment",
        "shipping",
    ]
    assert "http://127.0.0.1:9" in sources.sidecars
    assert set(sources.fault_urls) == {"courier", "payment-gateway", "recommendations"}


def test_no_running_demo_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCB_DEMO_STATE", str(tmp_path / "absent.json"))

    with pytest.raises(SourceError, match="no running demo"):
        from_arguments([], demo=True, redis=None, namespace="ccb")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "nothing to show"),
        (["--sidecar", "nonsense"], "--sidecar"),
        (["--sidecar", "http://127.0.0.1:1", "--port", "70000"], "--port"),
        (["--sidecar", "http://127.0.0.1:1", "--min-gap", "9"], "--min-gap"),
        (["--sidecar", "http://127.0.0.1:1", "--host", "203.0.113.77"], "cannot listen"),
    ],
)
def test_ccb_dashboard_exits_2_on_bad_arguments(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboard", *argv]) == 2
    assert message in capsys.readouterr().err


def test_ccb_dashboard_names_a_port_in_use(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code = main(["dashboard", "--sidecar", "http://127.0.0.1:1", "--port", str(port)])

    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
