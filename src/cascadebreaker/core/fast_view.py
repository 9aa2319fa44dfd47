"""What compiled drivers read of a slot's lock-free closed path, as a compiled object.

The sidecar's compiled pipeline admits and records most calls on this path. Reading the
interpreted `BreakerSlot`'s attributes from compiled code is a generic look-up each time (the
type's attribute cache, then the slot's descriptor), while the interpreted core reads them
through CPython's specialised slot access; a compiled slot would turn that round. So the slot
keeps both: its own `fast` and `successes` for the core, and this view for compiled drivers,
whose fields are plain struct members there.
"""

from __future__ import annotations

__all__ = ["FastView"]


class FastView:
    """A slot's closed path as a compiled driver sees it. The slot writes `fast` (under its
    lock, with its own); drivers add their lock-free successes to `successes`, which the slot
    counts with its own."""

    __slots__ = ("fast", "successes")

    def __init__(self) -> None:
        self.fast: int | None = None  # the slot's `fast`: the round, or None off this path
        self.successes = 0
