"""``pegasus boards``: list the boards and MCUs ``--board`` accepts (pegasus/boards.py holds the table)."""

from __future__ import annotations

import argparse

from pegasus.boards import table


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("boards", help="list the boards --board knows (core, clock, flash, RAM regions)",
                                   description="List the boards and MCUs that --board accepts, with their on-chip "
                                               "memories and the vendor documents the figures come from.")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print(table(), end="")
    return 0
