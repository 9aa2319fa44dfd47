"""Values drawn from fuzz bytes: a tiny FuzzedDataProvider that hypothesis can drive too."""

from __future__ import annotations

__all__ = ["Draw"]


class Draw:
    """Reads a fuzz input front to back; past its end every byte is zero."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        """The next `n` bytes."""
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk.ljust(n, b"\0")

    def byte(self) -> int:
        """The next byte."""
        return self.take(1)[0]

    def number(self, limit: int) -> int:
        """A number in [0, limit) from the next 8 bytes."""
        return int.from_bytes(self.take(8)) % limit

    def text(self, table: list[str], size: int) -> str:
        """1 to `size` characters, each byte mapped through `table` (256 entries)."""
        return "".join(map(table.__getitem__, self.take(1 + self.byte() % size)))

    def rest(self) -> bytes:
        """Everything not read yet."""
        return self.data[self.at :]
