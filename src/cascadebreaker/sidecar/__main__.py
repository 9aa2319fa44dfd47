"""`python -m cascadebreaker.sidecar --config FILE`: the sidecar without the rest of `ccb`.

Same as `ccb sidecar --config FILE`, minus the imports of the other subcommands (a leaner
process for container images).
"""

from __future__ import annotations

import argparse
import sys

from cascadebreaker.sidecar.command import add_arguments, run_command


def main() -> int:
    """Parse `--config FILE [--listen NAME=ADDR ...]` and run the sidecar."""
    parser = argparse.ArgumentParser(prog="python -m cascadebreaker.sidecar")
    add_arguments(parser)
    return run_command(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
