"""Config of the transparent listener and the `--listen` overrides: errors name the key."""

from __future__ import annotations

import re
import socket

import pytest

from cascadebreaker.sidecar.command import override_listeners
from cascadebreaker.sidecar.proxy.transparent import DestinationTable, original_destination
from cascadebreaker.sidecar.schema import ConfigError, parse_config

BASE = {"service": "a", "app": "http://127.0.0.1:8000"}


def test_transparent_is_off_by_default_and_parsed_when_set() -> None:
    assert parse_config({**BASE}).listen.transparent is None
    config = parse_config({**BASE, "listen": {"transparent": "127.0.0.1:15003"}})
    assert str(config.listen.transparent) == "127.0.0.1:15003"
    assert config.interception.unknown_destinations == "relay"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"listen": {"transparent": "15003"}}, "listen.transparent: must be host:port"),
        ({"interception": {"unknown_destinations": "drop"}}, "interception.unknown_destinations"),
        ({"interception": {"resolve_interval": 0}}, "interception.resolve_interval: must be > 0"),
    ],
)
def test_bad_values_name_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config({**BASE, **data})


def test_listen_overrides_pin_listeners_and_reject_unknown_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CCB_SECRET", raising=False)
    insecure = parse_config({**BASE, "listen": {"admin": "127.0.0.1:1"}})
    with pytest.raises(ConfigError, match=re.escape("allow_insecure: listen.admin 0.0.0.0")):
        override_listeners(insecure, ["admin=0.0.0.0:15000"])  # validated like the file
    config = parse_config({**BASE, "listen": {"admin": "127.0.0.1:1"}, "cascade": {"secret": "s"}})
    pinned = override_listeners(config, ["admin=0.0.0.0:15000", "transparent=127.0.0.1:15003"])
    assert str(pinned.listen.admin) == "0.0.0.0:15000"
    assert str(pinned.listen.transparent) == "127.0.0.1:15003"
    assert override_listeners(config, ["grpc="]).listen.grpc is None
    with pytest.raises(ConfigError, match="--listen sideways=1:2"):
        override_listeners(config, ["sideways=1:2"])
    with pytest.raises(ConfigError, match=re.escape("listen.admin: must be host:port")):
        override_listeners(config, ["admin=nowhere"])


def test_a_socket_that_was_not_redirected_has_no_original_destination() -> None:
    with socket.socket() as sock:
        assert original_destination(sock) is None


async def test_destination_table_resolves_names_and_literals() -> None:
    import asyncio

    table = DestinationTable({"payment": "http://localhost:8080", "ledger": "http://10.9.8.7"})
    await table.resolve(asyncio.get_running_loop())
    assert table.lookup(("127.0.0.1", 8080)) == "payment"
    assert table.lookup(("10.9.8.7", 80)) == "ledger"
    assert table.lookup(("127.0.0.1", 8081)) is None
