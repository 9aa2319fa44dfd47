"""TLS for the sidecar's gRPC: the listener's credentials, peers' channels, and reloading.

Certificates and keys come from PEM files (`grpc_tls:` in the config). They are checked when
read (readable, PEM, the key matches the certificate, the CA parses), so a bad file is a config
error naming its key. `GrpcTls` holds the current set: the listener's credentials ask it for
news at every handshake (grpc's dynamic server credentials), peers' channels are made from it
when they (re)connect, and `reload()` (SIGHUP, or a change of the files seen by `watch()`)
swaps in a new set only when the whole set reads and checks; else the old one stays. The
composition root plugs it into the runtime (`install_grpc_tls`) before the cascade, whose peer
channels use it.

TLS proves who is at the other end of a connection; it does not replace signed updates: a
leaked certificate alone cannot forge availability (cascade.md, "Trust").
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:  # the client imports this module and stays free of the config's pydantic
    # grpc itself is loaded only when credentials are made: checking the files at start-up
    # must not cost a sidecar without gRPC the ~20 MB of grpc's core.
    import grpc

    from cascadebreaker.sidecar.config import GrpcTlsConfig
    from cascadebreaker.sidecar.proxy.ports import PluginHost

__all__ = [
    "PLUGIN_NAME",
    "GrpcTls",
    "TlsError",
    "TlsMaterial",
    "channel_credentials",
    "channel_options",
    "install_grpc_tls",
    "installed_tls",
    "read_material",
]

log = logging.getLogger("cascadebreaker.sidecar.grpc")

PLUGIN_NAME = "grpc_tls"  # its key in the runtime's plug-ins (the listener and peers find it)

_CERT_MARK = b"-----BEGIN CERTIFICATE-----"
StrPath: TypeAlias = str | os.PathLike[str]  # not pathlib: the serving process does not load it
_KEY_MARK = b"PRIVATE KEY-----"


class TlsError(ValueError):
    """A certificate, key or CA file is unreadable or wrong; the message starts with its key."""


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """PEM bytes: a certificate chain and its key (either may be absent on a client), a CA."""

    cert_chain: bytes | None
    private_key: bytes | None
    ca: bytes | None


def _read(path: StrPath, key: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise TlsError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


def read_material(
    cert: StrPath | None,
    key: StrPath | None,
    ca: StrPath | None,
    *,
    prefix: str = "grpc_tls.",
) -> TlsMaterial:
    """Read and check PEM files; TlsError names the key (`prefix` + cert/key/ca)."""
    if cert is None and key is not None:
        raise TlsError(f"{prefix}cert: required with {prefix}key")
    if key is None and cert is not None:
        raise TlsError(f"{prefix}key: required with {prefix}cert")
    chain = private = roots = None
    if cert is not None and key is not None:
        chain = _read(cert, f"{prefix}cert")
        private = _read(key, f"{prefix}key")
        if _CERT_MARK not in chain:
            raise TlsError(f"{prefix}cert: no PEM certificate in {cert}")
        if _KEY_MARK not in private:
            raise TlsError(f"{prefix}key: no PEM private key in {key}")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
                raise TlsError(f"{prefix}key: {key} does not match {prefix}cert") from None
            raise TlsError(f"{prefix}cert: {cert} and {key} do not load: {exc}") from None
    if ca is not None:
        roots = _read(ca, f"{prefix}ca")
        if _CERT_MARK not in roots:
            raise TlsError(f"{prefix}ca: no PEM certificate in {ca}")
        try:
            ssl.create_default_context(cadata=roots.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
            raise TlsError(f"{prefix}ca: {ca} does not load: {exc}") from None
    return TlsMaterial(chain, private, roots)


def channel_credentials(material: TlsMaterial) -> grpc.ChannelCredentials:
    """Client credentials: verify the server against `ca` (else the system's roots); show our
    certificate when we have one (the server may require it)."""
    import grpc

    return grpc.ssl_channel_credentials(material.ca, material.private_key, material.cert_chain)


def channel_options(server_name: str | None) -> Sequence[tuple[str, Any]]:
    """Channel options: check `server_name` on the server's certificate instead of the host."""
    return (("grpc.ssl_target_name_override", server_name),) if server_name else ()


class GrpcTls:
    """The sidecar's current TLS set, its credentials both ways, and its reloading."""

    def __init__(self, config: GrpcTlsConfig) -> None:
        self.config = config
        self.material = self._load()
        self._stamp = self._files_stamp()
        self.generation = 0  # bumped by every reload that changed the set
        self.reloads = 0
        self.failed_reloads = 0
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None

    def _load(self) -> TlsMaterial:
        config = self.config
        material = read_material(config.cert, config.key, config.ca)
        if config.client_auth and material.ca is None:  # pragma: no cover - the model refuses it
            raise TlsError("grpc_tls.ca: required with grpc_tls.client_auth")
        return material

    def _files_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.config.cert, self.config.key, self.config.ca):
            if path is None:
                continue
            try:
                st = os.stat(path)  # follows symlinks: a Kubernetes secret swaps `..data`
            except OSError:
                stamps.append((0, 0, 0))
            else:
                stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    # -- server side ------------------------------------------------------------------------

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials for the listener: every new handshake picks up the newest set."""
        import grpc

        served = [self.generation]

        def fetch() -> Any:
            # Runs on a gRPC thread at each handshake: only compares a number.
            if served[0] == self.generation:
                return None
            served[0] = self.generation
            return self._certificate_configuration(self.material)

        return grpc.dynamic_ssl_server_credentials(
            self._certificate_configuration(self.material),
            fetch,
            require_client_authentication=self.config.client_auth,
        )

    @staticmethod
    def _certificate_configuration(material: TlsMaterial) -> Any:
        import grpc

        assert material.cert_chain is not None and material.private_key is not None
        return grpc.ssl_server_certificate_configuration(
            [(material.private_key, material.cert_chain)], root_certificates=material.ca
        )

    # -- client side ------------------------------------------------------------------------

    def secure_channel(self, address: str) -> grpc.aio.Channel:
        """A channel to a peer sidecar with the current set (peers' Watch streams)."""
        import grpc

        return grpc.aio.secure_channel(
            address,
            channel_credentials(self.material),
            options=channel_options(self.config.server_name),
        )

    # -- reloading --------------------------------------------------------------------------

    def reload(self) -> bool:
        """Read the files again; True when a new set is in force (a bad set keeps the old)."""
        self._stamp = self._files_stamp()
        try:
            material = self._load()
        except TlsError as exc:
            self.failed_reloads += 1
            self.last_error = str(exc)
            log.error("gRPC TLS not reloaded, the current certificates stay: %s", exc)
            return False
        self.last_error = None
        if material == self.material:
            return False
        self.material = material
        self.generation += 1
        self.reloads += 1
        log.info("gRPC TLS reloaded: new connections use the new certificates")
        return True

    def reload_if_changed(self) -> bool:
        """Reload when a file's inode, size or mtime moved since the last read."""
        if self._files_stamp() == self._stamp:
            return False
        return self.reload()

    async def watch(self) -> None:
        """Check the files every `reload_interval` seconds, for ever."""
        while True:
            await asyncio.sleep(self.config.reload_interval)
            self.reload_if_changed()

    def start(self) -> None:
        """Start watching the files (inside the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.watch())

    def drain(self) -> None:
        """Nothing to end at shutdown (a plug-in's first step)."""

    def close(self) -> None:
        """Stop watching the files."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def status(self) -> dict[str, Any]:
        """The `grpc_tls` section of /status."""
        return {
            "client_auth": self.config.client_auth,
            "reloads": self.reloads,
            "failed_reloads": self.failed_reloads,
            "last_error": self.last_error,
        }


def install_grpc_tls(host: PluginHost) -> GrpcTls | None:
    """Plug `grpc_tls:` of the config into the runtime (None for plaintext gRPC)."""
    if host.config.grpc_tls is None:
        return None
    tls = GrpcTls(host.config.grpc_tls)
    host.plugins[PLUGIN_NAME] = tls
    host.status_sections[PLUGIN_NAME] = tls.status
    tls.start()
    return tls


def installed_tls(host: object) -> GrpcTls | None:
    """The TLS set plugged into a runtime, if any."""
    tls = getattr(host, "plugins", {}).get(PLUGIN_NAME)
    return tls if isinstance(tls, GrpcTls) else None
