"""The composition root: the one place that wires the sidecar's parts and plug-ins together.

`build_runtime` makes the runtime and plugs gRPC TLS and the cascade into it (through the ports:
the runtime knows no plug-in); `SidecarServer` binds the listeners, handles SIGTERM and drains
in-flight requests; SIGHUP reloads the gRPC TLS certificates.

File descriptors are budgeted: the soft limit is raised to the hard one at start, client
connections of the data plane are capped below it (each may hold an upstream connection too),
and the admin listener has its own small cap inside a reserve, so `/healthz` answers even when
the data plane is full.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import resource
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

from cascadebreaker.sidecar.admin import AdminHandler
from cascadebreaker.sidecar.config import HostPort, LimitsConfig, SidecarConfig
from cascadebreaker.sidecar.http.connection import ServerConnection
from cascadebreaker.sidecar.http.exchange import RequestHandler
from cascadebreaker.sidecar.http.limits import ConnectionTracker, Limits
from cascadebreaker.sidecar.mesh.plugin import install_cascade
from cascadebreaker.sidecar.proxy.listeners import InboundHandler, OutboundHandler
from cascadebreaker.sidecar.proxy.runtime import SidecarRuntime
from cascadebreaker.stores.base import Store

log = logging.getLogger("cascadebreaker.sidecar")

# A shared store unreachable this long after start is reported (it connects in milliseconds).
_STORE_POLL = 0.1
_STORE_GRACE_POLLS = 20

ADMIN_CONNECTIONS = 32  # admin connections at once (probes, scrapes)
RESERVED_FDS = 128  # admin connections, listeners, gRPC, Redis, logs, connects in progress


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the file descriptor limit from %d: %s", soft, exc)
        else:
            log.info("file descriptor limit raised from %d to %d", soft, target)
            soft = target
    return int(soft)


def client_connection_cap(configured: int | None, fd_limit: int) -> int | None:
    """The data plane's connection cap: the configured one, at most what `fd_limit` allows."""
    if fd_limit == resource.RLIM_INFINITY or fd_limit < 0:
        return configured
    budget = max(1, (fd_limit - RESERVED_FDS) // 2)  # a client connection + its upstream one
    if configured is None:
        return budget
    if configured > budget:
        log.warning(
            "limits.max_connections %d needs more than the %d file descriptors allowed: "
            "capped at %d",
            configured,
            fd_limit,
            budget,
        )
        return budget
    return configured


def _tracker(limits: LimitsConfig, max_connections: int | None) -> ConnectionTracker:
    return ConnectionTracker(
        limits.header_timeout,
        limits.idle_timeout,
        body_timeout=limits.body_timeout,
        min_body_rate=limits.min_body_rate,
        tunnel_idle_timeout=limits.tunnel_idle_timeout,
        max_connections=max_connections,
    )


def build_runtime(
    config: SidecarConfig, store: Store | None = None, loop: asyncio.AbstractEventLoop | None = None
) -> SidecarRuntime:
    """The runtime with its plug-ins wired: the cascade, unless `cascade: {enabled: false}`.

    Build it inside the running event loop."""
    runtime = SidecarRuntime(config, loop, store)
    try:
        if config.grpc_tls is not None:  # before the cascade: its peer channels use it
            from cascadebreaker.sidecar.grpc.tls import install_grpc_tls

            install_grpc_tls(runtime)
        install_cascade(runtime)
    except BaseException:
        runtime.close()
        raise
    return runtime


class SidecarServer:
    """Owns the runtime and the listeners of one sidecar."""

    def __init__(self, config: SidecarConfig, store: Store | None = None) -> None:
        self.config = config
        self._store = store
        self.runtime: SidecarRuntime | None = None
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        cap = client_connection_cap(config.limits.max_connections, fd_limit)
        self.tracker = _tracker(config.limits, cap)  # outbound + inbound: the data plane
        self.admin_tracker = _tracker(config.limits, ADMIN_CONNECTIONS)
        self.servers: dict[str, asyncio.Server] = {}
        self._grpc: Any = None
        self._transparent: Any = None
        self._store_watch: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        """Build the runtime and bind every configured listener."""
        config = self.config
        runtime = self.runtime = build_runtime(config, store=self._store)
        limits = Limits(config.limits.max_header_bytes, config.limits.max_header_count)
        listen = config.listen
        handlers: list[tuple[str, HostPort | None, RequestHandler]] = [
            ("outbound", listen.outbound, OutboundHandler(runtime)),
            ("admin", listen.admin, AdminHandler(runtime, self.tracker)),
        ]
        if runtime.app_route is not None:
            handlers.append(("inbound", listen.inbound, InboundHandler(runtime)))
        for name, address, handler in handlers:
            if address is not None:
                tracker = self.admin_tracker if name == "admin" else self.tracker
                self.servers[name] = await self._listen(address, handler, limits, tracker)
        if listen.transparent is not None:
            from cascadebreaker.sidecar.proxy.transparent import TransparentListener

            self._transparent = TransparentListener(
                runtime, limits, self.tracker, config.interception
            )
            self.servers["transparent"] = await self._transparent.start(listen.transparent)
        if listen.grpc is not None:
            self._grpc = await _start_grpc(runtime, listen.grpc)
        # Everything built so far lives as long as the process: move it out of the collector's
        # sight, so a full collection scans only request-time objects (12-20 ms -> ~0).
        gc.collect()
        gc.freeze()
        runtime.ready = True
        runtime.status_sections["clients"] = self._client_status
        if not runtime.store_connected():
            self._store_watch = asyncio.get_running_loop().create_task(self._report_store())
        log.info(
            "sidecar %s up: %s",
            config.service,
            ", ".join(f"{name} {self.address(name)}" for name in self.servers),
        )

    async def _report_store(self) -> None:
        """Say at start that the shared store is unreachable (once), and when it connects."""
        runtime = self.runtime
        assert runtime is not None
        polls = 0
        while not runtime.store_connected():
            if polls == _STORE_GRACE_POLLS:
                log.warning(
                    "store %s unreachable: breakers run on local state; /readyz answers 503 "
                    "until it connects%s",
                    self.config.store,
                    " (store_optional: ready anyway)" if self.config.store_optional else "",
                )
            await asyncio.sleep(_STORE_POLL)
            polls += 1
        if polls > _STORE_GRACE_POLLS:
            log.warning("store %s connected", self.config.store)

    async def _listen(
        self, address: HostPort, handler: RequestHandler, limits: Limits, tracker: ConnectionTracker
    ) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        return await loop.create_server(
            lambda: ServerConnection(handler, limits, tracker),
            address.host,
            address.port,
            reuse_address=True,
            backlog=1024,
        )

    def _client_status(self) -> dict[str, Any]:
        tracker = self.tracker
        return {
            "open": len(tracker.connections),
            "max": tracker.max_connections,
            "refused": tracker.refused,
        }

    def address(self, listener: str) -> str:
        """`host:port` a listener is bound to (resolves port 0)."""
        sock = self.servers[listener].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"{host}:{port}"

    def reload(self) -> None:
        """SIGHUP: read the gRPC TLS files again (nothing else is reloaded)."""
        from cascadebreaker.sidecar.grpc.tls import installed_tls

        tls = installed_tls(self.runtime) if self.runtime is not None else None
        if tls is None:
            log.info("SIGHUP: nothing to reload (no grpc_tls)")
        else:
            tls.reload()

    def request_stop(self) -> None:
        """Ask `run()` to drain and return (signal handlers call this)."""
        self._stopping.set()

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish within the grace period, close.

        The admin listener stays up until the end: `/readyz` answers 503 while draining."""
        if self._store_watch is not None:
            self._store_watch.cancel()
        if self.runtime is not None:
            self.runtime.ready = False
            for plugin in self.runtime.plugins.values():
                plugin.drain()  # e.g. Watch streams, which never end on their own
        for name, server in self.servers.items():
            if name != "admin":
                server.close()
        if self._transparent is not None:
            self._transparent.close()
        grace = self.config.shutdown_grace
        grpc_stop = self._grpc.stop(grace) if self._grpc is not None else None
        self.tracker.drain()
        try:
            async with asyncio.timeout(grace):
                await self.tracker.idle_event.wait()
        except TimeoutError:
            log.warning("grace period over: cutting %d connections", len(self.tracker.connections))
            self.tracker.abort_all()
        if grpc_stop is not None:
            await grpc_stop
        admin = self.servers.get("admin")
        if admin is not None:
            admin.close()
        self.admin_tracker.drain()
        self.admin_tracker.abort_all()
        if self.runtime is not None:
            self.runtime.close()

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT, then drain."""
        fd_limit = raise_fd_limit()
        cap = client_connection_cap(self.config.limits.max_connections, fd_limit)
        self.tracker.max_connections = cap
        # Handlers first: a SIGTERM while listeners come up drains once they are up, instead
        # of killing a process that already accepts connections.
        _handle_signals(asyncio.get_running_loop(), self.request_stop, self.reload)
        await self.start()
        await self._stopping.wait()
        log.info("sidecar %s: draining", self.config.service)
        await self.stop()
        # Drained: supervisors repeat SIGTERM, and the rest of the teardown must not die by it.
        # Swapping our handler for SIG_IGN is one step; the default action is never back.
        for sig in (*_STOP_SIGNALS, signal.SIGHUP):
            with contextlib.suppress(ValueError):  # not the main thread: nothing was installed
                signal.signal(sig, signal.SIG_IGN)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _handle_signals(
    loop: asyncio.AbstractEventLoop, on_stop: Callable[[], None], on_reload: Callable[[], None]
) -> None:
    """SIGTERM/SIGINT call `on_stop`, SIGHUP `on_reload`, on the loop.

    Plain `signal.signal` handlers, not `loop.add_signal_handler`: the loop takes its handlers
    off by restoring the default action (when asked to, and when it closes). A stop signal
    landing in that moment, on any of the gRPC threads, kills the process with -15."""

    def handler(for_loop: Callable[[], None]) -> Callable[[int, FrameType | None], None]:
        def on_signal(_signum: int, _frame: FrameType | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the drain is over
                loop.call_soon_threadsafe(for_loop)

        return on_signal

    try:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, handler(on_stop))
        signal.signal(signal.SIGHUP, handler(on_reload))
    except ValueError:  # not the main thread (a server run in a test's thread): its owner stops it
        log.debug("signal handlers not installed: not the main thread")


async def _start_grpc(runtime: SidecarRuntime, address: HostPort) -> Any:
    """Start the gRPC API (loaded only when its listener is configured)."""
    try:
        from cascadebreaker.sidecar.grpc.api import start
    except ImportError as exc:
        log.warning("gRPC listener disabled: %s", exc)
        return None
    return await start(runtime, address)
