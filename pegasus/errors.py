"""User-facing errors.

Everything a user can get wrong (a missing file, an unsupported op, a bad flag value) raises
``PegasusError``; the CLI prints its one-line message on stderr and exits with code 2, with a
traceback only under ``--verbose``. Internal bugs stay ordinary exceptions so they are never
mistaken for bad input.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class PegasusError(Exception):
    """A problem with the user's input, reported as one line that says what and where."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None):
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class UnsupportedOpsError(PegasusError):
    """The model uses operators pegasus cannot convert; lists every one of them at once."""

    def __init__(self, problems: list[str], *, where: str | None = None):
        self.problems = problems
        super().__init__(f"unsupported operators ({len(problems)}): " + "; ".join(problems), where=where)


class NeedsConstantError(PegasusError):
    """An operator parameter (a shape, axes, pads...) is not known at compile time."""

    def __init__(self, tensor: str, node: str, op: str, what: str):
        self.tensor = tensor
        super().__init__(
            f"{op} node '{node}': input '{tensor}' ({what}) must be known at compile time; "
            "fix the input sizes with --input-size-list or --define-symbol so it can be folded"
        )


@contextlib.contextmanager
def errors_named(where: str) -> Iterator[None]:
    """A PegasusError raised inside without a place (a converter's, the IR builder's budget check) names
    ``where`` (the model file)."""
    try:
        yield
    except PegasusError as exc:
        if exc.where is None:
            exc.where = where
            exc.args = (f"{where}: {exc.message}",)
        raise
