"""Which permit a `with breaker:` block holds.

The `with` statement gives `__exit__` no handle on its own block: it calls the breaker's
`__exit__`, the same object for every block. A context variable is not enough to tell blocks
apart: interleaved generators share one context, a task starts with a copy of its parent's, and a
generator resumed on a worker thread (Starlette streaming a sync body over anyio threads) exits in
another context than it entered. What every block does keep is its *frame*: the function,
generator or coroutine running the `with` statement, the same object on whatever thread or in
whatever context it resumes. So each open block's entry is kept by the frame that runs it (nested
blocks of one frame stack up), and `__exit__` pops the entry of the frame that called it.

`contextlib.ExitStack.enter_context(b)` enters from contextlib's own frame and exits from
another one; such an entry is found at exit by walking from contextlib's frames to the frame that
uses the stack (`find_entered_elsewhere`; a finished function frame keeps its caller). An async
exit stack's entry is kept by the frame using the stack right away (a finished coroutine frame
does not keep its caller; async entries can afford the check).

A block whose exit runs in another function than its entry (a wrapper calling `__enter__` in one
method and `__exit__` in another) cannot be matched: its outcome counts for the current round
and a warning is logged once; such code should hold a permit from `acquire()` instead.
"""

from __future__ import annotations

import contextlib
from types import FrameType
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from .permit import Permit

Entry: TypeAlias = "Permit | int"  # a permit, or the round of a block on the lock-free path
Blocks: TypeAlias = "dict[FrameType, Entry | Nested]"  # frame -> its innermost open block
MAX_OPEN_BLOCKS = 10_000  # per breaker; beyond it the oldest entry is dropped (a leak guard)
CONTEXTLIB_GLOBALS = contextlib.__dict__


class Nested:
    """A block opened inside another block of the same frame."""

    __slots__ = ("below", "entry")

    def __init__(self, entry: Entry, below: Entry | Nested) -> None:
        self.entry = entry
        self.below = below


def forget_oldest(blocks: Blocks) -> None:
    """Drop the entry of the block opened longest ago (one that never exited: a leak guard)."""
    with contextlib.suppress(StopIteration, RuntimeError, KeyError):
        del blocks[next(iter(blocks))]


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The first frame at or above `frame` that is not contextlib's (ExitStack's callers)."""
    while frame is not None and frame.f_globals is CONTEXTLIB_GLOBALS:
        frame = frame.f_back
    return frame


def find_entered_elsewhere(blocks: Blocks, exit_frame: FrameType) -> Entry | Nested | None:
    """Pop the entry of a block that `exit_frame` did not open itself, when it can be matched:
    an exit stack's block, entered from contextlib's frame on behalf of the same user frame
    (a finished frame keeps its f_back). Newest first, as exit stacks unwind."""
    user = user_frame(exit_frame)
    if user is None or user is exit_frame:
        return None
    for frame in reversed(list(blocks)):
        if frame.f_globals is CONTEXTLIB_GLOBALS and user_frame(frame.f_back) is user:
            return blocks.pop(frame, None)
    return blocks.pop(user, None)  # entered by the user's frame, exited through a stack
