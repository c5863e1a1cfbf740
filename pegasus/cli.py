"""The ``pegasus`` command line: sub-commands mirroring Acuity's pegasus flags.

Bad input (a ``PegasusError``) prints one line on stderr and exits with 2; ``--verbose`` adds the
traceback. Any other exception is a bug in pegasus and exits with 1, saying so. Names in a message come from
model files, which may put a newline in an op's name: control characters are printed escaped (``one_line``).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from pegasus import __version__, limits
from pegasus.commands import batch, boards, compare, export, generate, import_model, inference, quantize, run
from pegasus.errors import PegasusError

COMMANDS = [import_model, generate, quantize, compare, inference, export, batch, run, boards]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pegasus",
        description="Convert trained neural networks into microcontroller code: import → quantize → export.")
    parser.add_argument("--version", action="version", version=f"pegasus {__version__}")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks and extra detail on errors")
    parser.add_argument(limits.FLAG, metavar="SIZE", help="the largest tensor a model file may declare, e.g. 1G "
                        f"(default {limits.DEFAULT_MAX_TENSOR_BYTES // 2**20}M; also ${limits.ENV_VAR}); "
                        "accepted anywhere on the line")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def one_line(text: object) -> str:
    """``text`` with every character that is not printable (newlines, line separators) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    if verbose:  # accepted anywhere on the line, not only before the sub-command
        argv.remove("--verbose")
    try:
        argv = limits.pop_flag(argv)  # accepted anywhere on the line too
    except PegasusError as exc:
        print(f"pegasus: error: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except PegasusError as exc:
        if verbose:
            traceback.print_exc()
        print(f"pegasus: error: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except MemoryError:  # a reader's budget (--max-tensor-bytes) should have refused this first
        if verbose:
            traceback.print_exc()
        print("pegasus: error: out of memory: the model needs more memory than this machine gives it (lower "
              f"{limits.FLAG} to have the tensor that causes it named)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pegasus: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (pegasus ... | head): not an error of pegasus
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 141
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        print(f"pegasus: internal error: {type(exc).__name__}: {one_line(exc)} (re-run with --verbose for the "
              "traceback and please report it)", file=sys.stderr)
        return 1
