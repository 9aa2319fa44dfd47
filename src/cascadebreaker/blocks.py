"""Which permit a `with breaker:` block holds.

The `with` statement gives `__exit__` no handle on its own block: it calls the breaker's
`__exit__`, the same object for every block. A context variable is not enough to tell blocks
apart: interleaved generators share one context, a task starts with a copy of its parent's, and a
generator resumed on a worker thread (Starlette streaming a sync body over anyio threads) exits in
another context than it entered. What every block does keep is its *frame*: the function,
generator or coroutine running the `with` statement, the same object on whatever thread or in
whatever context it resumes. So each open block's entry is kept by the frame that runs it (a
stack per frame, for nested blocks), and `contextlib`'s exit stacks are looked through to the
frame that uses them.

A block whose exit runs in another function than its entry (a wrapper calling `__enter__` in one
method and `__exit__` in another) cannot be matched: its outcome is recorded against the current
round and a warning is logged once; such code should hold a permit from `acquire()` instead.
"""

from __future__ import annotations

import contextlib
import sys
from types import FrameType
from typing import Generic, TypeVar

E = TypeVar("E")
_CONTEXTLIB = contextlib.__file__
MAX_OPEN_BLOCKS = 10_000  # per breaker; beyond it the oldest entry is dropped (a leak guard)


def block_frame(depth: int) -> FrameType:
    """The frame running the `with` statement, `depth` frames above the caller (through
    contextlib's ExitStack / AsyncExitStack to the frame that uses them)."""
    frame = sys._getframe(depth + 1)
    while frame.f_code.co_filename == _CONTEXTLIB and frame.f_back is not None:
        frame = frame.f_back
    return frame


class OpenBlocks(Generic[E]):
    """Entries of the blocks open on one breaker, by frame; nested blocks stack up."""

    __slots__ = ("_by_frame",)

    def __init__(self) -> None:
        self._by_frame: dict[FrameType, tuple[E, object]] = {}

    def push(self, frame: FrameType, entry: E) -> None:
        """Remember `entry` as the innermost open block of `frame`."""
        by_frame = self._by_frame
        by_frame[frame] = (entry, by_frame.get(frame))
        if len(by_frame) > MAX_OPEN_BLOCKS:
            with contextlib.suppress(StopIteration, RuntimeError, KeyError):
                del by_frame[next(iter(by_frame))]  # a block that never exited

    def pop(self, frame: FrameType) -> tuple[bool, E | None]:
        """(True, entry) of the innermost open block of `frame`; (False, None) if it has none."""
        by_frame = self._by_frame
        top = by_frame.pop(frame, None)
        if top is None:
            return False, None
        entry, below = top
        if below is not None:
            by_frame[frame] = below  # type: ignore[assignment]
        return True, entry

    def __len__(self) -> int:
        return len(self._by_frame)
