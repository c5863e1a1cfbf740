"""Small valid PyTorch files for the corpus, made with torch itself (fixed seeds, tiny layers):

- ``pt2/``: ``torch.export.save`` archives: a conv net (Conv2d, BatchNorm2d, ReLU, MaxPool2d, Linear), an MLP
  with a dynamic batch, and a model with a buffer and a tensor constant (the weights' payload configs and storages).
- ``pytorch_guard/``: what the archive guard classifies: a TorchScript ``.pt`` (torch.jit.trace), a state_dict
  (torch.save zip), a whole checkpoint dict, a bare tensor, a legacy (pre-1.6) torch.save pickle and a
  state_dict pickled with protocol 2 without the zip container.

    .venv/bin/python -m fuzz.seeds.pytorch
"""

from __future__ import annotations

import pickle
import shutil

from fuzz.targets import CORPUS


def _models(torch):
    nn = torch.nn

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(16, 5)

        def forward(self, x):
            y = nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
            return torch.softmax(self.fc(y.flatten(1)), 1)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 3)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x))) * 2.0

    class Buffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.linspace(0.5, 1.5, 4))
            self.offset = torch.arange(4, dtype=torch.float32)       # a tensor constant
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return torch.sigmoid(self.fc(x * self.scale + self.offset)).reshape(-1, 2, 2).sum(2)

    return ConvNet().eval(), Mlp().eval(), Buffers().eval()


def main() -> None:
    import torch

    torch.manual_seed(0)
    conv, mlp, buffers = _models(torch)
    with torch.no_grad():                      # trained-looking statistics for the batch norm
        conv.bn.running_mean.uniform_(-0.5, 0.5)
        conv.bn.running_var.uniform_(0.5, 1.5)
    folder = CORPUS / "pt2"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    torch.export.save(torch.export.export(conv, (torch.randn(1, 3, 4, 4),)), folder / "convnet.pt2")
    batch = torch.export.Dim("batch", min=1, max=64)
    torch.export.save(torch.export.export(mlp, (torch.randn(2, 6),), dynamic_shapes=({0: batch},)),
                      folder / "mlp_dynamic.pt2")
    torch.export.save(torch.export.export(buffers, (torch.randn(2, 4),)), folder / "buffers.pt2")

    folder = CORPUS / "pytorch_guard"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    torch.jit.save(torch.jit.trace(conv, torch.randn(1, 3, 4, 4)), folder / "torchscript.pt")
    torch.jit.save(torch.jit.script(mlp), folder / "scripted.pt")
    torch.save(mlp.state_dict(), folder / "state_dict.pth")
    torch.save({"epoch": 3, "model_state_dict": buffers.state_dict(), "lr": 0.1}, folder / "checkpoint.pth")
    torch.save(torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:], folder / "tensor.pt")
    torch.save(mlp.state_dict(), folder / "legacy.pth", _use_new_zipfile_serialization=False)
    with open(folder / "protocol2.pkl", "wb") as stream:
        pickle.dump({"a": [1, 2.5, "x", (None, True)], "b": {"c": b"bytes"}}, stream, protocol=2)


if __name__ == "__main__":
    main()
