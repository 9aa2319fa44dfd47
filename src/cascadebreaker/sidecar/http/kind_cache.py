"""Header kinds by raw spelling, for the per-header callbacks of the interpreted build.

Interpreted, one dict subscript (done in C) classifies a header name for less than the Python
of `wire.header_kind` costs; a name not seen before is classified once and kept (up to 4,096
spellings). Left out of the compiled build: there the callbacks call `header_kind`, cheaper
than hashing the name, and mypyc's classes cannot subclass dict.
"""

from __future__ import annotations

from typing import Final

from cascadebreaker.sidecar.http.wire import header_kind

_MAX_NAMES: Final = 4096


class HeaderKinds(dict[bytes, int]):
    """`header_kind` of each raw spelling, filled on first use."""

    def __missing__(self, name: bytes) -> int:
        kind = header_kind(name)
        if len(self) < _MAX_NAMES:
            self[name] = kind
        return kind


HEADER_KINDS: Final = HeaderKinds()
