"""Tiny TCP helpers run inside pod namespaces by the tests.

python tcp_probe.py origdst PORT        answer each connection with "redirected <ip>:<port>"
python tcp_probe.py echo PORT TEXT      answer each connection with TEXT
python tcp_probe.py ask HOST PORT       print the server's answer (or the error) and exit
"""

from __future__ import annotations

import socket
import struct
import sys

SO_ORIGINAL_DST = 80


def serve(port: int, answer: object) -> None:
    with socket.create_server(("0.0.0.0", port), reuse_port=False) as server:
        print("ready", flush=True)
        while True:
            conn, _ = server.accept()
            with conn:
                conn.sendall(str(answer if isinstance(answer, str) else answer(conn)).encode())


def original_destination(conn: socket.socket) -> str:
    raw = conn.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return f"redirected {socket.inet_ntoa(packed)}:{port}"


def main() -> None:
    mode = sys.argv[1]
    if mode == "origdst":
        serve(int(sys.argv[2]), original_destination)
    elif mode == "echo":
        serve(int(sys.argv[2]), sys.argv[3])
    elif mode == "ask":
        try:
            with socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=5) as conn:
                print(conn.recv(200).decode())
        except OSError as exc:
            print(f"error {type(exc).__name__}")


if __name__ == "__main__":
    main()
