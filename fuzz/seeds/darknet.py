"""Small Darknet models for the corpus (fuzz/corpus/darknet/<name>/: m.cfg + m.weights): a tiny YOLOv3-like
detector (convolutions with batch norm, maxpool, route, upsample, shortcut, two [yolo] heads), a classifier
(connected, dropout, avgpool, softmax) and a YOLOv2-style [region] head with a reorg-free route. The weights
file holds exactly the floats the cfg reads (counted by reading the cfg with an over-long file first), random
and positive (batch-norm variances must be)."""

from __future__ import annotations

import struct

import numpy as np

from fuzz.targets import CORPUS

_YOLO = ("[yolo]\nmask = {mask}\nanchors = 10,14, 23,27, 37,58, 81,82, 135,169, 344,319\nclasses=2\nnum=6\n"
         "jitter=.3\nignore_thresh = .7\nrandom=1\n")

MODELS = {
    "yolo_tiny": "[net]\nbatch=1\nwidth=32\nheight=32\nchannels=3\n\n"
                 "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n"
                 "[maxpool]\nsize=2\nstride=2\n\n"
                 "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n"
                 "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=1\nstride=1\npad=1\nactivation=leaky\n\n"
                 "[shortcut]\nfrom=-2\nactivation=linear\n\n"
                 "[maxpool]\nsize=2\nstride=2\n\n"
                 "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=21\nactivation=linear\n\n"
                 + _YOLO.format(mask="3,4,5") + "\n"
                 "[route]\nlayers = -3\n\n"
                 "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=1\nstride=1\npad=1\nactivation=leaky\n\n"
                 "[upsample]\nstride=2\n\n"
                 "[route]\nlayers = -1, 2\n\n"
                 "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=21\nactivation=linear\n\n"
                 + _YOLO.format(mask="0,1,2"),
    "classifier": "[net]\nwidth=12\nheight=12\nchannels=1\n\n"
                  "[convolutional]\nfilters=4\nsize=3\nstride=2\npad=1\nactivation=relu\n\n"
                  "[avgpool]\n\n"
                  "[connected]\noutput=6\nactivation=linear\n\n"
                  "[dropout]\nprobability=.5\n\n"
                  "[connected]\nbatch_normalize=1\noutput=3\nactivation=logistic\n\n"
                  "[softmax]\ngroups=1\n",
    "region": "[net]\nwidth=16\nheight=16\nchannels=3\n\n"
              "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n"
              "[maxpool]\nsize=2\nstride=1\n\n"
              "[convolutional]\nfilters=4\nsize=3\nstride=2\npad=1\ngroups=2\nactivation=mish\n\n"
              "[route]\nlayers=-1\ngroups=2\ngroup_id=1\n\n"
              "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=14\nactivation=linear\n\n"
              "[region]\nanchors = 1.08,1.19, 3.42,4.41\nbias_match=1\nclasses=2\ncoords=4\nnum=2\nsoftmax=1\n",
}


def main() -> None:
    from pegasus.importers.darknet.loader import import_darknet

    rng = np.random.default_rng(0)
    header = struct.pack("<iiiq", 0, 2, 5, 32013312)
    for name, cfg in MODELS.items():
        folder = CORPUS / "darknet" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "m.cfg").write_text(cfg)
        weights = folder / "m.weights"
        spare = 100_000
        weights.write_bytes(header + np.abs(rng.standard_normal(spare)).astype("<f4").tobytes())
        notes: list[str] = []
        import_darknet(folder / "m.cfg", weights, note=notes.append)
        left = int(notes[0].split(" holds ")[1].split(" floats")[0].replace(",", "")) if notes else 0
        weights.write_bytes(header + (np.abs(rng.standard_normal(spare - left)) * 0.5).astype("<f4").tobytes())
        import_darknet(folder / "m.cfg", weights)


if __name__ == "__main__":
    main()
