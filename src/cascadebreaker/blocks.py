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
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from .permit import Permit

Entry: TypeAlias = "Permit | int"  # a permit, or the round of a block on the lock-free path
Blocks: TypeAlias = "dict[FrameType, tuple[Entry, Any]]"  # frame -> (innermost, the rest)
CONTEXTLIB = contextlib.__file__
MAX_OPEN_BLOCKS = 10_000  # per breaker; beyond it the oldest entry is dropped (a leak guard)


def outside_contextlib(frame: FrameType) -> FrameType:
    """The first frame above `frame` that is not contextlib's (ExitStack, AsyncExitStack)."""
    while frame.f_code.co_filename == CONTEXTLIB and frame.f_back is not None:
        frame = frame.f_back
    return frame


def push(blocks: Blocks, frame: FrameType, entry: Entry) -> None:
    """Remember `entry` as the innermost open block of `frame` (`__enter__` inlines this)."""
    blocks[frame] = (entry, blocks.get(frame))
    if len(blocks) > MAX_OPEN_BLOCKS:
        forget_oldest(blocks)


def forget_oldest(blocks: Blocks) -> None:
    """Drop the entry of the block opened longest ago (one that never exited: a leak guard)."""
    with contextlib.suppress(StopIteration, RuntimeError, KeyError):
        del blocks[next(iter(blocks))]


def pop(blocks: Blocks, frame: FrameType) -> tuple[bool, Entry | None]:
    """(True, entry) of the innermost open block of `frame`; (False, None) if it has none."""
    top = blocks.pop(frame, None)
    if top is None:
        return False, None
    entry, below = top
    if below is not None:
        blocks[frame] = below
    return True, entry
