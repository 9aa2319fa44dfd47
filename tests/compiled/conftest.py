"""The library checks need the compiled build loaded: scripts/test-compiled sets
CCB_EXPECT_COMPILED=1 (and tests/conftest.py stops the run if the modules are not compiled)."""

from __future__ import annotations

import os

collect_ignore = (
    [] if os.environ.get("CCB_EXPECT_COMPILED") == "1" else ["test_compiled_library.py"]
)
