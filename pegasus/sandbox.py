"""Run code that must see untrusted bytes (a framework's own loader, an emulated program) in an operating-system
sandbox, and get back plain data only.

Some model formats cannot reasonably be read as data: TorchScript needs torch's compiler, inlining, freezing and
constant propagation, and those execute what the file says. Such a reader runs here, in a separate process
started through bubblewrap (``bwrap``, Debian's ``bubblewrap`` package, installed by
scripts/install_toolchains.sh): every namespace unshared (no network), no capabilities, killed with its parent,
a new session; the filesystem is read-only binds of just what Python needs (the interpreter's prefix, the venv,
pegasus's own packages, /usr) plus the model file alone at a fixed path, and a small private tmpfs as home, cwd
and scratch; resource limits on address space, CPU time, file size and open files; a wall-clock timeout.

The child is assumed compromised once it has touched the model. It answers on a pipe with a length-prefixed
JSON header (the result's structure and, per array, a dtype from a short list and a shape) followed by the raw
little-endian array bytes. The parent never unpickles anything: it parses the JSON, checks every array against
the tensor budget (pegasus/limits.py) and the bytes actually sent, and builds the arrays with ``np.frombuffer``.
An error in the child comes back as one sanitised line; a crash, a timeout or running out of memory becomes a
one-line PegasusError naming the file. Without bwrap, or where it cannot create namespaces, the reader is
refused with a line saying how to install it: nothing ever falls back to loading outside the sandbox.

``sandbox_argv`` builds the same kind of command line for other programs (QEMU running a bundle with
semihosting: see exporters/glow/run/toolchains.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pegasus import limits
from pegasus.errors import PegasusError, UnsupportedOpsError

INSTALL_HINT = "install bubblewrap (apt-get install bubblewrap, or run scripts/install_toolchains.sh)"
MODEL_PATH = "/sandbox/model"   # where the model file appears inside the sandbox
SCRATCH = "/scratch"            # the private tmpfs: home, cwd and TMPDIR
MAGIC = b"PGSB"
#: the dtypes an array from the child may have (always little-endian)
DTYPES = {name: np.dtype(name).newbyteorder("<") for name in
          ("float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")}
HEADER_LIMIT = 64 * 2**20
MESSAGE_LIMIT = 400


@dataclass(frozen=True)
class Limits:
    """What a sandboxed process may use. ``memory`` None: 3 GiB plus six tensors of the budget."""

    memory: int | None = None
    cpu_seconds: int = 600
    wall_seconds: float = 600.0
    file_bytes: int = 16 * 2**20
    open_files: int = 256
    scratch_bytes: int = 64 * 2**20

    def address_space(self) -> int:
        return self.memory if self.memory is not None else 3 * 2**30 + 6 * limits.max_tensor_bytes()


@dataclass
class Reply:
    """What a sandboxed function returned: JSON data and the arrays it refers to by index."""

    data: Any
    arrays: list[np.ndarray] = field(default_factory=list)


# ------------------------------------------------------------------------------------------- the jail

def find_bwrap(what: str) -> str:
    """The bwrap executable, checked once to be able to create a sandbox here; a one-line error otherwise."""
    path = shutil.which("bwrap")
    if path is None:
        raise PegasusError(f"{what} runs in a sandbox and needs bubblewrap (bwrap not found): {INSTALL_HINT}")
    if path not in _WORKING:
        probe = subprocess.run([path, *_isolation(), "--ro-bind", "/", "/", "--", "/bin/true"],
                               capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
        if probe.returncode != 0:
            first = _clean((probe.stderr or "").strip().splitlines()[0] if probe.stderr.strip() else "no message")
            raise PegasusError(f"{what} runs in a sandbox, but bubblewrap cannot create one here ({first}); it "
                               "needs user or mount namespaces (run as root, or allow unprivileged user namespaces)")
        _WORKING.add(path)
    return path


_WORKING: set[str] = set()


def _isolation() -> list[str]:
    return ["--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL"]


def _system_dirs() -> list[str]:
    """/lib, /lib64, /bin, /sbin as the host has them (symlinks into /usr on a merged-/usr system)."""
    found = []
    for top in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(top):
            found += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            found += ["--ro-bind", top, top]
    return found


def sandbox_argv(command: Sequence[str], *, read_only: Iterable[str | Path] = (), writable: Iterable[str | Path] = (),
                 env: dict[str, str] | None = None, scratch_bytes: int = 64 * 2**20, chdir: str = SCRATCH,
                 system: bool = True, what: str = "this program", binds: Sequence[str] = ()) -> list[str]:
    """The bwrap command line running ``command`` isolated: ``read_only`` paths bound read-only at the same
    place, ``writable`` ones read-write, a private tmpfs at /scratch (the cwd unless ``chdir``), /proc, a
    minimal /dev, the root read-only, nothing else of the host (``system``: all of /usr too; else only what
    ``read_only`` names, e.g. /usr/lib without /usr/bin: no shell). /lib, /bin... are the host's links.
    ``binds``: more bwrap mount arguments (``--ro-bind-fd FD DEST``)."""
    argv = [find_bwrap(what), *_isolation(), "--clearenv", *binds]
    if system:
        argv += ["--ro-bind", "/usr", "/usr"]
    argv += _system_dirs()
    for path in read_only:
        argv += ["--ro-bind", str(path), str(path)]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(scratch_bytes), "--tmpfs", SCRATCH,
             "--remount-ro", "/", "--chdir", chdir]
    for key, value in {"HOME": SCRATCH, "TMPDIR": SCRATCH, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                       **(env or {})}.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


def rlimits(bounds: Limits):
    """A preexec function setting ``bounds`` as hard limits (inherited by bwrap and everything it starts)."""
    address_space = bounds.address_space()

    def lower(which: int, soft: int, hard: int) -> None:
        """Lower a limit (never above the one this process already has: raising it would fail)."""
        _, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(which, (soft, hard))

    def apply() -> None:
        for which, value in ((resource.RLIMIT_AS, address_space), (resource.RLIMIT_FSIZE, bounds.file_bytes),
                             (resource.RLIMIT_NOFILE, bounds.open_files), (resource.RLIMIT_CORE, 0)):
            lower(which, value, value)
        # SIGXCPU at the soft limit (reported as such), SIGKILL a few seconds later if it is caught
        lower(resource.RLIMIT_CPU, bounds.cpu_seconds, bounds.cpu_seconds + 5)
    return apply


def _python_paths() -> list[str]:
    """What the interpreter and pegasus need to start: the prefixes and pegasus's packages (an editable
    install maps them to the source tree)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for package in ("pegasus", "pegasus.importers", "pegasus.exporters", "pegasus.quantizers"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            paths.update(spec.submodule_search_locations)
    paths = {str(Path(p).resolve()) for p in paths if p and os.path.isdir(p)}
    # a path inside another one is bound with it; /usr is bound anyway
    return sorted(p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths | {"/usr"})
                  and p != "/usr")


# ------------------------------------------------------------------------------------------ the parent

def run_sandboxed(module: str, function: str, model_path: str | Path, args: Sequence[Any] = (), *,
                  what: str = "the reader", bounds: Limits | None = None,
                  import_paths: Sequence[str | Path] = ()) -> Reply:
    """``module.function(Path(MODEL_PATH), *args)`` in a sandboxed child that sees ``model_path`` alone, read
    only; the function returns ``(data, arrays)``: JSON-able data and a list of NumPy arrays it refers to by
    index. ``import_paths``: more folders, bound read-only and put first on the child's sys.path (the tests'
    own child code). Any failure is a one-line PegasusError naming ``model_path``."""
    bounds = bounds or Limits()
    where = str(model_path)
    try:
        fd = os.open(model_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise PegasusError(f"cannot open the model file ({exc.strerror})", where=where) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PegasusError("not a regular file", where=where)
        env = {"PEGASUS_MAX_TENSOR_BYTES": str(limits.max_tensor_bytes()), "PYTHONDONTWRITEBYTECODE": "1",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
        extra = [str(Path(p).resolve()) for p in import_paths]
        child = [sys.executable, "-I", "-B", "-c", "from pegasus.sandbox import child_main; child_main()",
                 module, function, MODEL_PATH, json.dumps(list(args)), json.dumps(extra)]
        argv = sandbox_argv(child, read_only=[*_python_paths(), *extra], env=env, scratch_bytes=bounds.scratch_bytes,
                            what=what, binds=["--ro-bind-fd", str(fd), MODEL_PATH])
        out, err, code, stopped = _communicate(argv, bounds, pass_fds=(fd,))
    finally:
        os.close(fd)
    if stopped:
        raise PegasusError(f"{what} {stopped}", where=where)
    if code > 128 and not out.startswith(MAGIC):   # bwrap's exit status for a child killed by a signal
        code = 128 - code
    if code < 0:
        reason = {signal.SIGXCPU: f"used more than {bounds.cpu_seconds} s of CPU",
                  signal.SIGXFSZ: "wrote more than its file-size limit",
                  signal.SIGKILL: "was killed (out of memory or CPU time)"}.get(-code)
        reason = reason or f"crashed ({_signal_name(-code)})"
        raise PegasusError(f"{what} {reason}", where=where)
    if not out.startswith(MAGIC):
        last = _clean(err.strip().splitlines()[-1]) if err.strip() else "no reply"
        if code == 1 and err.startswith("bwrap:"):
            raise PegasusError(f"{what}: bubblewrap could not start the sandbox ({last})", where=where)
        raise PegasusError(f"{what} stopped without a reply (exit {code}: {last})", where=where)
    return parse_reply(out, what, where)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _communicate(argv: list[str], bounds: Limits, pass_fds=()) -> tuple[bytes, str, int, str | None]:
    """Run ``argv``; stdout read up to a bound (beyond it the child is stopped), the last 8 KB of stderr kept."""
    cap = HEADER_LIMIT + 8 * limits.max_tensor_bytes() + 16
    too_much = False
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=rlimits(bounds), pass_fds=pass_fds, start_new_session=True)
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + bounds.wall_seconds
    timed_out = False
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        open_pipes = 2
        while open_pipes and not too_much:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(timeout=min(remaining, 1.0)):
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    selector.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                key.data.extend(chunk)
                if key.data is err and len(err) > 16384:
                    del err[:-8192]
                too_much = too_much or len(out) > cap
    if timed_out or too_much:
        _kill(proc)
    code = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    stopped = f"sent more than {cap} bytes and was stopped" if too_much else None
    if timed_out:
        stopped = f"took longer than {bounds.wall_seconds:g} s and was stopped"
    return bytes(out), err.decode("utf-8", "replace"), code, stopped


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _clean(text: str) -> str:
    """One printable line of at most MESSAGE_LIMIT characters."""
    line = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    return line if len(line) <= MESSAGE_LIMIT else line[:MESSAGE_LIMIT - 3] + "..."


def parse_reply(out: bytes, what: str, where: str) -> Reply:
    """The child's reply, checked: header size, JSON, each array's dtype and shape against the budget and the
    bytes sent. Anything else is a one-line error."""
    def bad(reason: str):
        raise PegasusError(f"{what} sent a malformed reply ({reason})", where=where)

    if len(out) < len(MAGIC) + 8:
        bad("too short")
    size = int.from_bytes(out[4:12], "little")
    if size > HEADER_LIMIT or 12 + size > len(out):
        bad(f"header of {size} bytes")
    try:
        header = json.loads(out[12:12 + size].decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError):
        bad("header is not JSON")
    if not isinstance(header, dict) or not isinstance(header.get("ok"), bool):
        bad("header is not an object with 'ok'")
    if not header["ok"]:
        message = _clean(str(header.get("error", "unknown error")).replace(MODEL_PATH, Path(where).name))
        problems = header.get("problems")
        if isinstance(problems, list) and problems and all(isinstance(p, str) for p in problems):
            raise UnsupportedOpsError([_clean(p) for p in problems[:200]], where=where)
        raise PegasusError(message, where=where)
    specs = header.get("arrays")
    if not isinstance(specs, list):
        bad("no array list")
    blob = memoryview(out)[12 + size:]
    arrays, offset = [], 0
    for index, spec in enumerate(specs):
        if not isinstance(spec, dict) or spec.get("dtype") not in DTYPES or not isinstance(spec.get("shape"), list):
            bad(f"array {index} has no known dtype and shape")
        dtype, shape = DTYPES[spec["dtype"]], spec["shape"]
        if not all(type(d) is int for d in shape) or len(shape) > 32:
            bad(f"array {index} has a bad shape")
        nbytes = limits.check_tensor(shape, dtype.itemsize, f"array {index} from {what}", where)
        limits.check_present(offset + nbytes, len(blob), f"array {index} from {what}", where)
        count = nbytes // dtype.itemsize
        array = np.frombuffer(blob, dtype, count, offset) if count else np.zeros(0, dtype)
        arrays.append(array.reshape(shape).astype(dtype.newbyteorder("="), copy=True))
        offset += nbytes
    if offset != len(blob):
        bad(f"{len(blob) - offset} bytes beyond the arrays")
    return Reply(header.get("data"), arrays)


# ------------------------------------------------------------------------------------------- the child

def child_main() -> None:
    """Inside the sandbox: ``module function model_path args_json`` on the command line; the reply goes to the
    original stdout, and anything the loaded code prints goes to stderr instead."""
    reply = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    module, function, model_path, args, extra = sys.argv[1:6]
    sys.path[:0] = json.loads(extra)
    try:
        data, arrays = getattr(importlib.import_module(module), function)(Path(model_path), *json.loads(args))
        header, blobs = {"ok": True, "data": data, "arrays": []}, []
        for array in arrays:
            array = np.asarray(array, order="C")   # (ascontiguousarray would make a 0-d array 1-d)
            name = array.dtype.name
            if name not in DTYPES:
                raise PegasusError(f"a tensor has dtype {name}, which pegasus does not import")
            header["arrays"].append({"dtype": name, "shape": list(array.shape)})
            blobs.append(array.astype(DTYPES[name], copy=False))
        _send(reply, header, blobs)
    except PegasusError as exc:
        problems = exc.problems if isinstance(exc, UnsupportedOpsError) else None
        _send(reply, {"ok": False, "error": exc.message, "problems": problems}, [])
    except MemoryError:
        _send(reply, {"ok": False, "error": "ran out of memory in the sandbox (raise --max-tensor-bytes if the "
                                            "model really is this large)"}, [])
    except RecursionError:
        _send(reply, {"ok": False, "error": "the model nests too deeply (recursion limit)"}, [])
    except Exception as exc:  # noqa: BLE001 - any failure of the framework on the file is reported as one line
        traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _send(reply, {"ok": False, "error": f"{type(exc).__name__}: {first}" if first else type(exc).__name__}, [])
    reply.close()


def _send(stream, header: dict, blobs: list[np.ndarray]) -> None:
    text = json.dumps(header, allow_nan=True).encode()
    stream.write(MAGIC + len(text).to_bytes(8, "little") + text)
    for blob in blobs:
        stream.write(memoryview(blob.reshape(-1)).cast("B") if blob.size else b"")
    stream.flush()
