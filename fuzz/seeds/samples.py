"""Input samples for ``inference --input`` / ``quantize`` datasets, each for an input of shape [1, 3, 8, 8]: a
.npy, an ONNX TensorProto .pb, a .tensor text file (one value per line), and PNG, JPEG and BMP images (8x8 RGB)."""

from __future__ import annotations

import numpy as np

from fuzz.targets import CORPUS


def main() -> None:
    from onnx import numpy_helper
    from PIL import Image

    folder = CORPUS / "samples"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    value = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(folder / "x.npy", value)
    (folder / "x.pb").write_bytes(numpy_helper.from_array(value, "x").SerializeToString())
    (folder / "x.tensor").write_text("\n".join(f"{v:.6f}" for v in value.reshape(-1)) + "\n")
    pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    for suffix in ("png", "jpg", "bmp"):
        Image.fromarray(pixels).save(folder / f"x.{suffix}")


if __name__ == "__main__":
    main()
