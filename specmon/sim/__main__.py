"""`python -m specmon.sim ...`: the simulated server without the rest of the CLI."""

from __future__ import annotations

import argparse
import sys

from specmon.errors import UserError
from specmon.sim.options import DESCRIPTION, add_arguments, config_from_args
from specmon.sim.server import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specmon.sim", description=DESCRIPTION)
    add_arguments(parser)
    try:
        cfg = config_from_args(parser.parse_args(argv))
    except UserError as exc:
        print(f"specmon: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
