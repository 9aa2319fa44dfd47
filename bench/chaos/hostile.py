"""Hostile clients, in their own process: slow clients and a fuzzing client.

    python -m bench.chaos.hostile --target PORT:PREFIX ... --slow 2000 --fuzz-rate 20 \\
        --seconds 600 --out hostile.json

Slow clients hold connections open the ways a client can: a request head trickled a byte at a
time, a body promised by Content-Length and trickled, nothing at all after connecting. When the
sidecar cuts one (408, or a close), it connects again after a pause. The fuzzing client sends
mutated requests (valid ones with bytes flipped, inserted, cut, or framing headers changed) on
fresh connections and reads until the sidecar answers or closes. Counts go to `--out` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import time
from collections import Counter
from pathlib import Path

VALID = [
    b"GET {p}/v1/charges/7 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n",
    b"POST {p}/v1/charges HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 5\r\n\r\nhello",
    b"POST {p}/v1/charges HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\n\r\n",
    b"GET {p}/v1/charges/1 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\nGET {p}/v1/charges/2 HTTP/1.1\r\n"
    b"host: 127.0.0.1\r\nconnection: close\r\n\r\n",
    b"GET {p}/v1/charges/3 HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\n"
    b"connection: upgrade\r\n\r\n",
]
NOISE = [
    b"\x00",
    b"\r\n",
    b"\r\n\r\n",
    b" ",
    b":",
    b"content-length: 99999999999999999999\r\n",
    b"transfer-encoding: chunked\r\n",
    b"content-length: -1\r\n",
    b"ffffffffffffffff\r\n",
    b"HTTP/1.1",
    b"\xff\xfe",
    b"GET",
    b"%00",
    b"ccb-hop: v1.x.1.-\r\n",
    b"ccb-serving-endpoint: GET /x\r\n",
]


def mutate(rng: random.Random, request: bytes) -> bytes:
    """Flip, insert, delete or duplicate a few spots of `request`."""
    data = bytearray(request)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        op = rng.randrange(5)
        if op == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            data[at:at] = rng.choice(NOISE)
        elif op == 2:
            del data[at : at + rng.randint(1, 8)]
        elif op == 3:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            data += data[at : at + rng.randint(1, 32)]
    return bytes(data)


class Hostile:
    """The slow clients and the fuzzing client, with their counters."""

    def __init__(self, targets: list[tuple[int, str]], deadline: float, seed: int) -> None:
        self.targets = targets
        self.deadline = deadline
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.unanswered: list[str] = []  # the first requests closed without an answer

    async def slow_client(self, n: int) -> None:
        """One slow connection after another until the deadline."""
        port, prefix = self.targets[n % len(self.targets)]
        kind = ("head", "body", "silent")[n % 3]
        await asyncio.sleep(self.rng.random() * 5)  # spread the connects
        while time.monotonic() < self.deadline:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                self.counts["slow_connect_failed"] += 1
                await asyncio.sleep(1)
                continue
            self.counts[f"slow_{kind}_opened"] += 1
            try:
                await self._trickle(kind, prefix, reader, writer)
            except (OSError, asyncio.IncompleteReadError):
                self.counts["slow_reset"] += 1
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            await asyncio.sleep(0.5 + self.rng.random())

    async def _trickle(
        self, kind: str, prefix: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if kind == "head":
            payload = f"GET {prefix}/v1/charges/9 HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ".encode()
        elif kind == "body":
            payload = f"POST {prefix}/v1/charges HTTP/1.1\r\nhost: 127.0.0.1\r\n".encode()
            writer.write(payload + b"content-length: 100000\r\n\r\n")
            payload = b"x" * 100000
        else:
            payload = b""
        at = 0
        while time.monotonic() < self.deadline:
            if at < len(payload):
                writer.write(payload[at : at + 1])
                at += 1
            read = asyncio.ensure_future(reader.read(256))
            done, _ = await asyncio.wait({read}, timeout=2.0)
            if not done:
                read.cancel()
                continue
            answer = read.result()
            if not answer:
                self.counts[f"slow_{kind}_closed"] += 1
                return
            self.statuses[f"slow {answer[9:12].decode(errors='replace')}"] += 1
            await reader.read()  # the sidecar closes after its 408
            return

    async def fuzz_client(self, rate: float, concurrency: int) -> None:
        """Mutated requests at `rate` a second, at most `concurrency` at once."""
        slots = asyncio.Semaphore(concurrency)
        tasks: set[asyncio.Task[None]] = set()
        while time.monotonic() < self.deadline:
            await slots.acquire()
            port, prefix = self.rng.choice(self.targets)
            request = self.rng.choice(VALID).replace(b"{p}", prefix.encode())
            task = asyncio.ensure_future(self._fuzz_one(port, mutate(self.rng, request), slots))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(1 / rate)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _fuzz_one(self, port: int, data: bytes, slots: asyncio.Semaphore) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            self.counts["fuzz_connect_failed"] += 1
            slots.release()
            return
        self.counts["fuzz_sent"] += 1
        try:
            writer.write(data)
            writer.write_eof()  # the sidecar sees the end: nothing more comes
            # Longer than the sidecar's head + body timeouts: silence past it is a hang.
            answer = await asyncio.wait_for(reader.read(), timeout=30)
            if answer.startswith(b"HTTP/1.1 "):
                self.statuses[f"fuzz {answer[9:10].decode()}xx"] += 1
            elif answer:
                self.counts["fuzz_not_http"] += 1
            else:
                self.counts["fuzz_closed_silently"] += 1
                if len(self.unanswered) < 20:
                    self.unanswered.append(repr(data[:300]))
        except TimeoutError:
            self.counts["fuzz_hung"] += 1
        except OSError:
            self.counts["fuzz_reset"] += 1
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            slots.release()


async def run(args: argparse.Namespace) -> dict[str, object]:
    """All clients until `--seconds` have passed."""
    targets = []
    for item in args.target:
        port, _, prefix = item.partition(":")
        targets.append((int(port), prefix))
    hostile = Hostile(targets, time.monotonic() + args.seconds, args.seed)
    jobs = [hostile.slow_client(n) for n in range(args.slow)]
    if args.fuzz_rate > 0:
        jobs.append(hostile.fuzz_client(args.fuzz_rate, 64))
    await asyncio.gather(*jobs)
    return {
        "counts": dict(hostile.counts),
        "statuses": dict(hostile.statuses),
        "unanswered": hostile.unanswered,
    }


def main() -> None:
    """Parse arguments, raise our descriptor limit, run, write the counts."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", action="append", required=True, metavar="PORT:PREFIX")
    parser.add_argument("--slow", type=int, default=2000)
    parser.add_argument("--fuzz-rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.slow + 1024)), hard))
    result = asyncio.run(run(args))
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
