"""What ``pegasus inference`` does with results: print the top-5 classes, dump tensors as Acuity does
(``attach_<name>_out0_<sample>_<d0>_<d1>...tensor``, one value per line) and ``outputs.npz``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pegasus.fileio import atomic_path, atomic_write

POSTPROCESS_CHOICES = ("print_topn", "dump_result", "classification_classic")


def top_n(values: np.ndarray, n: int = 5) -> list[tuple[int, float]]:
    flat = np.asarray(values, dtype=np.float64).ravel()
    order = np.argsort(-flat, kind="stable")[:n]
    return [(int(i), float(flat[i])) for i in order]


def format_top_n(name: str, values: np.ndarray, n: int = 5) -> str:
    pairs = top_n(values, n)
    best, score = pairs[0]
    ranked = " ".join(f"{index}:{value:.6f}" for index, value in pairs)
    return f"{name}: class {best} ({score:.4f}); top-{len(pairs)} {ranked}"


def dump_name(tensor: str, sample: int, shape: tuple[int, ...]) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", tensor)
    return f"attach_{safe}_out0_{sample}_{'_'.join(str(d) for d in shape)}.tensor"


def dump_tensor(folder: Path, tensor: str, sample: int, value: np.ndarray) -> Path:
    target = folder / dump_name(tensor, sample, value.shape)
    text = "\n".join(f"{v:.6f}" if np.issubdtype(value.dtype, np.floating) else str(v) for v in value.ravel())
    atomic_write(target, text + "\n")
    return target


def save_outputs_npz(folder: Path, stacked: dict[str, list[np.ndarray]]) -> Path:
    target = folder / "outputs.npz"
    with atomic_path(target, suffix=".npz") as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, **{name: np.stack(values) for name, values in stacked.items()})
    return target
