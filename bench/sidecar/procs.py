"""The processes under test: nginx (upstream and peer proxy), the aiohttp peer proxy, the floor
proxies, sidecars.

Every process is a foreground child on loopback free ports with its files in one temp dir; no
system configuration is read or written. `Proc` tracks CPU seconds and peak RSS per process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cascadebreaker.testing.ports import free_port as free_port

HERE = Path(__file__).resolve().parent
BODY = "hello, world\n"  # the upstream's fixed 13-byte body


class BenchSetupError(RuntimeError):
    """A process under test could not be started."""


@dataclass
class Proc:
    """A child process under test."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    extra_ports: dict[str, int] = field(default_factory=dict)

    def cpu_seconds(self) -> float:
        """User + system CPU seconds used so far (from /proc)."""
        return sum(self.cpu_times())

    def cpu_times(self) -> tuple[float, float]:
        """User and system (kernel) CPU seconds used so far (see `CpuReading`)."""
        return self.cpu_reading().split()

    def cpu_reading(self) -> CpuReading:
        """The process's CPU counters now: subtract two for the CPU of a round."""
        return CpuReading.of(self.process.pid)

    def peak_rss_mb(self) -> float:
        """Peak resident set size (VmHWM) in MiB."""
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def pss_mb(self) -> float:
        """Proportional set size now (shared pages divided among their sharers), in MiB."""
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.process.pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def rss_mb(self) -> float:
        """Current resident set size (VmRSS) in MiB."""
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


@dataclass(frozen=True)
class CpuReading:
    """A process's CPU counters at one moment.

    `exact`: the scheduler's on-CPU seconds of every live thread, to the nanosecond
    (`/proc/PID/task/*/schedstat`), or None where the kernel does not offer it. `user` and
    `system`: /proc/PID/stat's clock ticks (10 ms each: over a 3 s round at 1000 requests/s,
    ±3 µs a request). The ticks only split the exact total into user and system time."""

    exact: float | None
    user: float
    system: float

    @classmethod
    def of(cls, pid: int) -> CpuReading:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return cls(None, 0.0, 0.0)
        ticks = os.sysconf("SC_CLK_TCK")
        return cls(_on_cpu_seconds(pid), int(fields[11]) / ticks, int(fields[12]) / ticks)

    def split(self, since: CpuReading | None = None) -> tuple[float, float]:
        """User and system seconds (since `since`): the exact total when both readings have
        one, shared out as the ticks counted in the same span."""
        user, system, exact = self.user, self.system, self.exact
        if since is not None:
            user, system = user - since.user, system - since.system
            exact = None if exact is None or since.exact is None else exact - since.exact
        if exact is None or exact < 0:  # a thread that ended took its time with it
            return user, system
        share = system / (user + system) if user + system > 0 else 0.0
        return exact * (1 - share), exact * share


def _on_cpu_seconds(pid: int) -> float | None:
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            if task.exists():
                return None  # there but unreadable: no exact total
    return total / 1e9


def wait_http(
    port: int,
    path: str,
    proc: subprocess.Popen[bytes],
    name: str,
    log: Path,
    kill_on_failure: bool = True,
) -> None:
    """Wait until `GET path` on the port answers 200; else kill `proc` and raise with its log."""
    deadline = time.monotonic() + 20
    request = f"GET {path} HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n".encode()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(request)
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    if kill_on_failure:
        _give_up(proc)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise BenchSetupError(f"{name} did not answer 200 on port {port}:\n{tail}")


def wait_tcp(port: int, proc: subprocess.Popen[bytes], name: str, log: Path) -> None:
    """Wait until the port accepts connections (for listeners that do not speak HTTP/1.1)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    _give_up(proc)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise BenchSetupError(f"{name} did not listen on port {port}:\n{tail}")


def _give_up(proc: subprocess.Popen[bytes]) -> None:
    """Kill a process that never became ready (nobody else holds it yet)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=5)


def _spawn(
    name: str, argv: list[str], workdir: Path, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env)
    return process, log


_NGINX_MAIN = """\
daemon off;
master_process off;
worker_processes 1;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
{servers}
}}
"""

_NGINX_UPSTREAM = """\
    server {{
        listen 127.0.0.1:{port};
        location / {{ default_type text/plain; return 200 "{body}"; }}
    }}
"""

_NGINX_PROXY = """\
    upstream app {{ server 127.0.0.1:{upstream}; keepalive 64; keepalive_requests 10000000; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
"""


def start_nginx(name: str, workdir: Path, servers: str, port: int) -> Proc:
    """One single-process nginx in the foreground, `-p` its own dir, no system config."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise BenchSetupError("nginx not found: apt-get install -y nginx")
    root = workdir / name
    root.mkdir()
    conf = root / "nginx.conf"
    conf.write_text(_NGINX_MAIN.format(dir=root, servers=servers))
    process, log = _spawn(name, [binary, "-p", str(root), "-c", str(conf), "-e", "stderr"], root)
    proc = Proc(name, process, port, log)
    wait_http(port, "/", process, name, log)
    return proc


def start_upstream(workdir: Path) -> Proc:
    """The fixed upstream: nginx returning a 13-byte body (fast enough never to be the limit)."""
    port = free_port()
    body = BODY.replace("\n", "\\n")
    return start_nginx("upstream", workdir, _NGINX_UPSTREAM.format(port=port, body=body), port)


def start_nginx_proxy(workdir: Path, upstream: int, name: str = "nginx-proxy") -> Proc:
    """nginx as a reverse proxy with a keep-alive pool to the upstream (the peer to beat)."""
    port = free_port()
    return start_nginx(name, workdir, _NGINX_PROXY.format(port=port, upstream=upstream), port)


def start_aiohttp_proxy(workdir: Path, upstream: int) -> Proc:
    """A minimal aiohttp reverse proxy (bench/sidecar/aiohttp_proxy.py) in its own process."""
    port = free_port()
    argv = [
        sys.executable,
        str(HERE / "aiohttp_proxy.py"),
        str(port),
        f"http://127.0.0.1:{upstream}",
    ]
    process, log = _spawn("aiohttp-proxy", argv, workdir)
    proc = Proc("aiohttp-proxy", process, port, log)
    wait_http(port, "/", process, "aiohttp-proxy", log)
    return proc


FLOOR_PROXIES = HERE / "floor_proxies.py"


def start_floor_proxy(workdir: Path, kind: str, upstream: int, name: str) -> Proc:
    """A floor proxy (bench/sidecar/floor_proxies.py): `relay` (bytes) or `httptools` (HTTP)."""
    port = free_port()
    argv = [sys.executable, str(FLOOR_PROXIES), kind, str(port), str(upstream)]
    process, log = _spawn(name, argv, workdir)
    proc = Proc(name, process, port, log)
    wait_http(port, "/", process, name, log)
    return proc


def start_grpc_floor(workdir: Path, upstream: int | None = None) -> Proc:
    """A grpc.aio server answering `Call` at once (bench/sidecar/grpc_floor.py); with
    `upstream`, after a bare GET to it."""
    port = free_port()
    argv = [sys.executable, str(HERE / "grpc_floor.py"), str(port)]
    name = "grpc-floor"
    if upstream is not None:
        argv.append(str(upstream))
        name = "grpc-floor-fetch"
    process, log = _spawn(name, argv, workdir)
    proc = Proc(name, process, port, log)
    wait_tcp(port, process, name, log)
    return proc


def ccb_command() -> list[str]:
    ccb = Path(sys.executable).with_name("ccb")
    if ccb.exists():
        return [str(ccb)]
    return [
        sys.executable,
        "-c",
        "import sys; from cascadebreaker.cli import main; sys.exit(main())",
    ]


def start_sidecar(
    workdir: Path, name: str, config: Mapping[str, object], probe: str, tree: Path | None = None
) -> Proc:
    """`ccb sidecar --config FILE`; ready once `GET probe` through its first listener is 200.

    `tree`: import cascadebreaker from there (an unpacked compiled wheel) instead of the venv;
    the serving process (exec'd, same environment) is checked to have loaded its .so files."""
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(config)))
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    argv = [*ccb_command(), "sidecar", "--config", str(path)]
    process, log = _spawn(name, argv, workdir, env)
    listen = config["listen"]
    assert isinstance(listen, dict)
    ports = {k: int(str(v).rsplit(":", 1)[1]) for k, v in listen.items() if v}
    main = ports.get("outbound") or ports["inbound"]
    proc = Proc(name, process, main, log, ports)
    wait_http(main, probe, process, name, log)
    if tree is not None and str(tree) not in Path(f"/proc/{process.pid}/maps").read_text():
        proc.stop()
        raise BenchSetupError(f"{name}: serving without the compiled modules of {tree}")
    return proc


def start_client_sidecar(
    workdir: Path, upstream_url: str, name: str, tree: Path | None = None
) -> Proc:
    """A sidecar whose upstream `payment` is `upstream_url` (the app calls its outbound port)."""
    config = {
        "service": "checkout",
        "listen": {
            "outbound": f"127.0.0.1:{free_port()}",
            "inbound": None,
            "grpc": f"127.0.0.1:{free_port()}",
            "admin": f"127.0.0.1:{free_port()}",
        },
        "upstreams": {
            "payment": {"url": upstream_url, "timeout": 10.0, "max_idle_connections": 256}
        },
        "log_level": "warning",
    }
    return start_sidecar(workdir, name, config, "/payment/", tree)


def start_server_sidecar(
    workdir: Path, app_port: int, name: str = "sidecar-server", tree: Path | None = None
) -> Proc:
    """The upstream service's sidecar: its inbound listener forwards to the app (nginx)."""
    config = {
        "service": "payment",
        "app": f"http://127.0.0.1:{app_port}",
        "listen": {
            "outbound": None,
            "inbound": f"127.0.0.1:{free_port()}",
            "grpc": None,
            "admin": f"127.0.0.1:{free_port()}",
        },
        "log_level": "warning",
    }
    return start_sidecar(workdir, name, config, "/", tree)


IMPORT_PROBES = {
    "python, no imports": "",
    "imports of the sidecar (no gRPC)": "import cascadebreaker.sidecar.server",
    "imports of the sidecar + gRPC API": "import cascadebreaker.sidecar.server, "
    "cascadebreaker.sidecar.grpc.api",
}


def import_rss_mb() -> dict[str, float]:
    """RSS (MiB) of a fresh Python after each set of imports: the floor of a sidecar's memory."""
    out: dict[str, float] = {}
    for label, statement in IMPORT_PROBES.items():
        code = (
            f"{statement}\nimport re\nprint(re.search(r'VmRSS:\\s+(\\d+)', "
            "open('/proc/self/status').read()).group(1))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode == 0 and done.stdout.strip().isdigit():
            out[label] = int(done.stdout.strip()) / 1024
    return out
