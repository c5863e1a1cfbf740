"""Small trained Keras models for the corpus: .h5 files written by tf-keras (Keras 2) and by Keras 3's legacy
writer (fuzz/corpus/keras_h5/), and Keras 3 .keras zips (fuzz/corpus/keras_zip/). Each model is trained for a
few steps on random data so its weights are real trained arrays (a BatchNormalization's moving statistics
moved, biases non-zero). Run with tf-keras and Keras 3 installed; the output is committed."""

from __future__ import annotations

import os

import numpy as np

from fuzz.targets import CORPUS

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _train(model, rng: np.random.Generator) -> None:
    x = rng.standard_normal((8,) + tuple(model.input_shape[1:])).astype(np.float32)
    y = rng.standard_normal((8,) + tuple(model.output_shape[1:])).astype(np.float32)
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, epochs=2, batch_size=4, verbose=0)


def _keras2(rng: np.random.Generator, folder) -> None:
    import tf_keras as k

    conv = k.Sequential([k.layers.Input((8, 8, 3)), k.layers.Conv2D(4, 3, padding="same"),
                         k.layers.BatchNormalization(), k.layers.ReLU(), k.layers.MaxPooling2D(),
                         k.layers.Flatten(), k.layers.Dense(5, activation="softmax")])
    _train(conv, rng)
    conv.save(folder / "k2_convnet.h5", include_optimizer=False)

    x = k.Input((6, 4))
    r = k.layers.LSTM(5, return_sequences=True)(x)
    g = k.layers.GRU(3)(r)
    d = k.layers.Dense(2)(k.layers.concatenate([g, k.layers.GlobalAveragePooling1D()(x)]))
    rnn = k.Model(x, d)
    _train(rnn, rng)
    rnn.save(folder / "k2_recurrent.h5", include_optimizer=False)


def _keras3(rng: np.random.Generator, h5_folder, zip_folder) -> None:
    import keras as k

    x = k.Input((8, 8, 2))
    c = k.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    d = k.layers.DepthwiseConv2D(3, padding="same")(c)
    s = k.layers.Add()([c, d])
    p = k.layers.GlobalAveragePooling2D()(k.layers.BatchNormalization()(s))
    y = k.layers.Dense(3)(p)
    model = k.Model(x, y)
    _train(model, rng)
    model.save(zip_folder / "k3_residual.keras")
    model.save(h5_folder / "k3_residual.h5")

    inner = k.Sequential([k.layers.Input((6,)), k.layers.Dense(8, activation="tanh"), k.layers.Dense(4)],
                         name="backbone")
    x = k.Input((5, 6))
    t = k.layers.TimeDistributed(inner)(x)
    b = k.layers.Bidirectional(k.layers.GRU(3))(t)
    y = k.layers.Dense(2)(b)
    model = k.Model(x, y)
    _train(model, rng)
    model.save(zip_folder / "k3_nested.keras")


def main() -> None:
    rng = np.random.default_rng(0)
    h5_folder, zip_folder = CORPUS / "keras_h5", CORPUS / "keras_zip"
    h5_folder.mkdir(parents=True, exist_ok=True)
    zip_folder.mkdir(parents=True, exist_ok=True)
    _keras2(rng, h5_folder)
    _keras3(rng, h5_folder, zip_folder)


if __name__ == "__main__":
    main()
