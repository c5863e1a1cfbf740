"""NAME.json + NAME.data pairs for the corpus, one folder per model: the ONNX corpus models and a TFLite one
imported by pegasus itself (a conv net with constants, a model of shape ops, a recurrent model, a trained
sine model)."""

from __future__ import annotations

from fuzz.targets import CORPUS


def main() -> None:
    from pegasus.importers.onnx.loader import import_onnx
    from pegasus.importers.tflite.loader import import_tflite
    from pegasus.ir.serialize import save

    folder = CORPUS / "ir"
    for name in ("convnet", "shapes", "recurrent"):
        out = folder / name
        out.mkdir(parents=True, exist_ok=True)
        save(import_onnx(CORPUS / "onnx" / f"{name}.onnx"), out / "model.json", out / "model.data")
    out = folder / "sine"
    out.mkdir(parents=True, exist_ok=True)
    save(import_tflite(CORPUS / "tflite" / "sine_float.tflite"), out / "model.json", out / "model.data")


if __name__ == "__main__":
    main()
