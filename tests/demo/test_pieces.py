"""The demo's pure pieces: topology, sidecar configs, fault specs, outcome classification."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascadebreaker.demo.control import parse_fault
from cascadebreaker.demo.load import classify, percentile
from cascadebreaker.demo.precheck import Availability, parse_availability
from cascadebreaker.demo.sidecars import sidecar_config, write_sidecar_config
from cascadebreaker.demo.topology import Mode, Timings, Topology


def test_every_listener_gets_its_own_port() -> None:
    topology = Topology.allocate("sidecar")

    ports = []
    for spec in topology.services.values():
        ports.append(spec.port)
        if spec.sidecar is not None:
            ports += [
                spec.sidecar.outbound,
                spec.sidecar.inbound,
                spec.sidecar.grpc,
                spec.sidecar.admin,
            ]
    assert len(ports) == len(set(ports)) == 8 + 5 * 4


def test_callers_reach_upstreams_directly_or_through_their_sidecar() -> None:
    plain = Topology.allocate("plain")
    mesh = Topology.allocate("sidecar")

    assert plain.upstream_base_url("order", "shipping") == plain.service("shipping").app_url
    outbound = mesh.service("order").sidecar
    assert outbound is not None
    assert mesh.upstream_base_url("order", "shipping") == (
        f"http://127.0.0.1:{outbound.outbound}/shipping"
    )
    assert mesh.public_url == mesh.service("gateway").ingress_url != mesh.service("gateway").app_url
    with pytest.raises(KeyError, match="does not call"):
        plain.upstream_base_url("inventory", "courier")


def test_call_timeouts_grow_towards_the_entry() -> None:
    topology = Topology.allocate("direct", Timings(call_timeout=1.0))

    assert topology.call_timeout("courier") == 1.0
    assert topology.call_timeout("shipping") == 2.0
    # The orchestrator runs three steps in sequence: its callers wait for all of them.
    assert topology.call_timeout("order") > topology.call_timeout("shipping") * 2


def test_topology_round_trips_through_json(tmp_path: Path) -> None:
    topology = Topology.allocate("sidecar", Timings(recovery_timeout=1.5))
    path = tmp_path / "topology.json"

    topology.save(path)

    assert Topology.load(path) == topology


def test_sidecar_config_points_each_upstream_at_the_peer_sidecar(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    topology = Topology.allocate(Mode.SIDECAR, Timings(failure_threshold=4))

    config = yaml.safe_load(write_sidecar_config(topology, "order", tmp_path).read_text())

    assert config["service"] == "order"
    assert config["app"] == topology.service("order").app_url
    assert set(config["upstreams"]) == {"inventory", "payment", "shipping", "recommendations"}
    assert config["upstreams"]["shipping"]["url"] == topology.service("shipping").ingress_url
    assert config["upstreams"]["shipping"]["breaker"]["failure_threshold"] == 4
    # External upstreams have no sidecar: payment's sidecar calls the gateway itself.
    payment = sidecar_config(topology, "payment")
    assert payment["upstreams"]["payment-gateway"]["url"] == (
        topology.service("payment-gateway").app_url
    )


def test_sidecar_config_is_accepted_by_the_sidecar(tmp_path: Path) -> None:
    sidecar_config_module = pytest.importorskip("cascadebreaker.sidecar.schema")
    topology = Topology.allocate(Mode.SIDECAR)

    for name in ("gateway", "order", "payment", "shipping", "inventory"):
        path = write_sidecar_config(topology, name, tmp_path)
        assert sidecar_config_module.load_config(path).service == name


def test_externals_have_no_sidecar_config() -> None:
    with pytest.raises(ValueError, match="no sidecar"):
        sidecar_config(Topology.allocate("sidecar"), "courier")


@pytest.mark.parametrize(
    ("spec", "body"),
    [
        ("down", {"mode": "down"}),
        ("slow", {"mode": "slow"}),
        ("slow=3.5", {"mode": "slow", "delay": 3.5}),
        ("errors", {"mode": "errors"}),
        ("errors=0.5", {"mode": "errors", "rate": 0.5}),
    ],
)
def test_fault_specs(spec: str, body: dict[str, object]) -> None:
    assert parse_fault(spec) == body


@pytest.mark.parametrize("spec", ["", "melted", "errors=1.5", "errors=-0.1", "slow=fast"])
def test_bad_fault_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="fault"):
        parse_fault(spec)


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (201, {"status": "created"}, "ok"),
        (409, {"status": "failed"}, "failed"),
        (503, {"status": "refused"}, "refused"),
        (503, {"error": "circuit open", "circuitState": "OPEN"}, "refused"),
        (503, {"error": "unavailable"}, "error"),
        (503, {"error": "unavailable", "cause": ["courier * *"]}, "refused"),
        (502, {"status": "failed"}, "error"),
        (0, None, "error"),
    ],
)
def test_order_outcomes(status: int, body: object, outcome: str) -> None:
    assert classify(status, body) == outcome


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"available": True}, Availability(True)),
        (
            {"available": False, "cause": ["courier POST /v1/shipments"]},
            Availability(False, ("courier POST /v1/shipments",)),
        ),
        (
            {"available": False, "causes": [{"endpoint": "shipping POST /v1/shipments"}]},
            Availability(False, ("shipping POST /v1/shipments",)),
        ),
        (
            {"available": False, "causeChain": [{"endpoint": "courier * *", "reason": "open"}]},
            Availability(False, ("courier * *",)),
        ),
        ({"available": "no"}, Availability(True)),  # unreadable: fail open
        ([1, 2], Availability(True)),
    ],
)
def test_availability_answers(body: object, expected: Availability) -> None:
    assert parse_availability(json.loads(json.dumps(body))) == expected


def test_unavailable_endpoints_read_from_a_sidecar_status() -> None:
    from cascadebreaker.demo.observe import _unavailable

    status = {
        "cascade": {
            "unavailable": [
                {
                    "endpoint": "order POST /v1/orders",
                    "cause_chain": [
                        {"endpoint": "courier * *", "reason": "circuit open"},
                        {"endpoint": "shipping POST /v1/shipments", "reason": "requires"},
                        {"endpoint": "order POST /v1/orders", "reason": "requires"},
                    ],
                }
            ]
        }
    }

    assert _unavailable(status) == [
        "order POST /v1/orders: courier * * (circuit open) -> shipping POST /v1/shipments"
    ]
    assert _unavailable({"breakers": {}}) == []


def test_process_sample_reads_cpu_and_memory_of_live_processes() -> None:
    import os

    from cascadebreaker.demo.overhead import sample

    busy = sum(i * i for i in range(200_000))  # spend a little CPU first
    mine = sample([os.getpid()])

    assert busy > 0
    assert mine.cpu_s > 0
    assert mine.rss_bytes > 1_000_000
    assert sample([2**22 + 12345]) == type(mine)(0.0, 0)  # a vanished process counts as zero


def test_overhead_summary_over_windows() -> None:
    from cascadebreaker.demo.overhead import RateWindow, _added, summarize

    windows = [
        RateWindow(0.5, 1.0, 100 * 2**20, 10, [1.0, 2.0]),
        RateWindow(1.5, 1.0, 120 * 2**20, 10, [3.0]),
    ]
    base = summarize(10.0, windows)

    assert base["cpu_percent"] == 100.0
    assert base["rss_mb"] == 120.0
    assert base["mean_ms"] == 2.0
    assert base["orders"] == 20
    heavier = {**base, "mean_ms": 2.5, "cpu_percent": 110.0, "rss_mb": 132.0}
    added = _added(base, heavier)
    assert (added["mean_ms"], added["cpu_relative_pct"], added["rss_relative_pct"]) == (
        0.5,
        10.0,
        10.0,
    )


def test_results_check_names_what_is_missing() -> None:
    from cascadebreaker.demo.report import FAULT_NAMES, MODE_NAMES, REQUIRED_CASE_FIELDS, problems

    case = dict.fromkeys(REQUIRED_CASE_FIELDS, 1) | {
        "early_refusals_while_healthy": 0,
        "false_refusals": 0,
        "failed_orders": 0,
    }
    complete = {
        "faults": {f: {m: dict(case) for m in MODE_NAMES} for f in FAULT_NAMES},
        "overhead": {"added": [{"rate": 10.0}]},
    }
    complete["faults"]["replicas_courier_down"]["plain"]["compensations"] = 100
    assert problems(complete) == []

    del complete["faults"]["gateway_slow"]["cascade"]["recovery_s"]
    complete["faults"]["intermittent"]["plain"]["early_refusals_while_healthy"] = 2
    del complete["overhead"]
    complete["faults"]["soft_down"]["cascade"] |= {"outcome_refused": 3, "false_refusals": 3}
    complete["faults"]["soft_down"]["none"] |= {"failed_orders": 3, "outcome_failed": 2}
    complete["faults"]["courier_down"]["plain"]["compensations"] = 100
    complete["faults"]["courier_down"]["cascade"]["compensations"] = 6
    complete["faults"]["intermittent@failure_rate"] = {"plain": {}}

    assert problems(complete) == [
        "faults.gateway_slow.cascade.recovery_s missing",
        "faults.intermittent.plain: early refusals while healthy",
        "faults.soft_down.cascade: 3 false refusals",
        "faults.soft_down.none: 2 failed sagas",
        "faults.soft_down.cascade: 3 refused orders",
        "faults.courier_down.cascade: 6 compensations, more than 5% of plain's 100",
        *[f"faults.intermittent@failure_rate.plain.{k} missing" for k in REQUIRED_CASE_FIELDS],
        "overhead section missing (needs direct and sidecar runs)",
    ]
    assert problems({}) == ["no 'faults' section"]


def test_results_check_holds_the_cascade_to_its_promises_with_replicas() -> None:
    from cascadebreaker.demo.report import REPLICA_MODES, REQUIRED_CASE_FIELDS, problems

    case = dict.fromkeys(REQUIRED_CASE_FIELDS, 1) | {
        "early_refusals_while_healthy": 0,
        "false_refusals": 0,
    }
    faults = {
        f: {m: dict(case) for m in REPLICA_MODES}
        for f in ("replica_route", "replicas_courier_down")
    }
    faults["replica_route"]["cascade"]["outcome_refused"] = 4
    faults["replicas_courier_down"]["plain"]["compensations"] = 100
    faults["replicas_courier_down"]["cascade"]["compensations"] = 6
    faults["replicas_courier_down"]["cascade"]["time_to_first_early_refusal_s"] = None
    found = [p for p in problems({"faults": faults}) if "replica" in p]
    assert found == [
        "faults.replica_route.cascade: 4 orders refused at the entry although two shipping "
        "replicas could serve them",
        "faults.replicas_courier_down.cascade: 6 compensations, more than 5% of plain's 100",
        "faults.replicas_courier_down.cascade: never refused at the entry",
    ]
    assert "faults.replica_route.none missing" not in problems({"faults": faults})


@pytest.mark.parametrize(
    "kwargs",
    [{"rate": 0.0, "count": 1}, {"rate": 5.0}, {"rate": 5.0, "count": 1, "concurrency": 0}],
)
async def test_load_rejects_unbounded_or_empty_settings(kwargs: dict[str, float]) -> None:
    from cascadebreaker.demo.load import run_load

    with pytest.raises(ValueError, match=r"run_load needs|rate must be"):
        await run_load("http://127.0.0.1:9", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", ["--seconds", "--rate", "--recovery-timeout"])
def test_demo_rejects_non_positive_settings(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    from cascadebreaker.cli import main

    assert main(["demo", "--mode", "direct", flag, "0"]) == 2
    assert "must be > 0" in capsys.readouterr().err


def test_replicas_get_their_own_ports_sidecars_and_instance_names(tmp_path: Path) -> None:
    topology = Topology.allocate("sidecar", replicas={"shipping": 3})
    replicas = topology.replicas("shipping")
    assert [r.name for r in replicas] == ["shipping", "shipping.2", "shipping.3"]
    assert {r.service for r in replicas} == {"shipping"}
    assert all(r.sidecar is not None for r in replicas)
    assert topology.replica_counts == {"shipping": 3}
    order = sidecar_config(topology, "order")
    assert order["upstreams"]["shipping"]["urls"] == [r.ingress_url for r in replicas]
    assert "url" not in order["upstreams"]["shipping"]
    assert order["upstreams"]["payment"]["url"] == topology.service("payment").ingress_url
    third = sidecar_config(topology, "shipping.3")
    assert third["service"] == "shipping"
    assert third["cascade"]["instance"] == "shipping.3"
    again = Topology.from_json(json.loads(json.dumps(topology.to_json())))
    assert again == topology
    plain = Topology.allocate("plain", replicas={"shipping": 2})
    assert plain.upstream_base_urls("order", "shipping") == [
        r.app_url for r in plain.replicas("shipping")
    ]


@pytest.mark.parametrize("bad", [{"courier": 2}, {"gateway": 2}, {"shipping": 0}, {"nope": 2}])
def test_replicas_of_an_unknown_or_external_service_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="replicas"):
        Topology.allocate("sidecar", replicas=bad)
