"""Model text (graph, layer and tensor names) into generated files, one escaping function per language.

A model's names are the model author's text: an exported bundle must never let one of them become code of
the files it writes (C in main.c and NAME.h, Make in the Makefile, LLVM IR, Graphviz dot). Every name that
reaches such a file goes through one of the functions here, and templates are filled in ONE pass, so a name
that looks like a placeholder (``@OUTPUTS@``) is never expanded:

- ``c_string``: a C string literal that decodes to the name's UTF-8 bytes; everything outside a plain
  printable set (quotes, backslash, ``?`` of trigraphs, ``*`` of ``*/``, controls, non-ASCII) is a
  three-digit octal escape, which cannot run on into the next character as a hex escape would;
- ``c_comment``: the same text for a ``//`` or ``/* */`` comment (no newline, no backslash, no ``*/``);
- ``bundle_name`` / ``make_word``: the bundle name, which becomes file names, the entry point, macro
  prefixes and Make variables, must be a plain C identifier; anything else is refused, not escaped;
- ``dot_text`` / ``dot_string``: text in a Graphviz string or record label, unsafe characters as entities;
- ``fill_template``: ``@KEY@`` placeholders replaced in one regex pass from a dict (unknown keys refused).
"""

from __future__ import annotations

import re
import string

from pegasus.errors import PegasusError

#: printable ASCII a C string literal or comment may hold as is: not ``"``, ``\``, ``?`` (trigraphs such as
#: ``??/``), ``*`` (``*/`` ends a block comment) or ``'``
C_SAFE = frozenset(string.ascii_letters + string.digits + " _.,:;+-=/<>()[]{}!#%&^|~@$`")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: the longest bundle name: NAME.weights.bin, NAME.memory.json and NAME_run stay well within a file name's
#: 255 bytes
MAX_BUNDLE_NAME = 200
PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def c_string(text: str) -> str:
    """``text`` as a complete C string literal (with its quotes) whose bytes are ``text``'s UTF-8."""
    return '"' + "".join(chr(b) if chr(b) in C_SAFE else f"\\{b:03o}" for b in text.encode()) + '"'


def c_comment(text: str) -> str:
    """``text`` for the inside of a C comment (``//`` or ``/* */``), quoted: the escapes of ``c_string``."""
    return c_string(text)


def bundle_name(name: str) -> str:
    """``name`` if it can be the bundle's name (a C identifier of at most MAX_BUNDLE_NAME ASCII characters:
    it names files, the entry point, macros and Make variables), else a one-line error."""
    if not IDENTIFIER.match(name) or len(name) > MAX_BUNDLE_NAME:
        raise PegasusError(f"bundle name {c_string(name[:80])} is not a C identifier of at most {MAX_BUNDLE_NAME} "
                           "ASCII letters, digits and underscores (--network-name)")
    return name


def make_word(text: str) -> str:
    """``text`` for a Makefile variable, target or comment: only identifier characters and ``.`` are let
    through (Make has no escape for a newline, ``#`` or ``:`` in every context); anything else is refused."""
    if not re.fullmatch(r"[A-Za-z0-9_.]+", text):
        raise PegasusError(f"{c_string(text[:80])} cannot be written into a Makefile")
    return text


def dot_text(text: str) -> str:
    """``text`` for inside a Graphviz quoted string or record label: everything outside ``C_SAFE`` but for
    the record syntax (``{ } | < >``) and ``&`` is an HTML entity (``&#92;``), which Graphviz shows as the
    character; no backslash or quote is ever written, so no name can end the string or split a record."""
    return "".join(ch if ch in C_SAFE and ch not in "{}|<>&" else f"&#{ord(ch)};" for ch in text)


def dot_string(text: str) -> str:
    """``text`` as a Graphviz double-quoted string (``dot_text`` inside quotes)."""
    return '"' + dot_text(text) + '"'


def fill_template(text: str, values: dict[str, str]) -> str:
    """Every ``@KEY@`` of ``text`` replaced by ``values[KEY]`` in one pass: replaced text is never scanned
    again, so a value holding ``@OTHER@`` stays as it is. A placeholder with no value is an error."""
    missing = {m.group(1) for m in PLACEHOLDER.finditer(text)} - set(values)
    if missing:
        raise ValueError(f"template placeholders without a value: {sorted(missing)}")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
