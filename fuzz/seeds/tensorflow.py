"""Small valid TensorFlow models for the corpus, made with TensorFlow itself:

- ``tf_graphdef/``: frozen GraphDefs: a conv net (Conv2D, BiasAdd, FusedBatchNormV3, Relu, MaxPool, Reshape,
  MatMul, Softmax), a graph whose nested ``tf.function``s stay calls into the function library
  (PartitionedCall), and a ``tf.cond`` on a bool input kept as StatelessIf with branch functions and lowered to
  Switch/Merge. Every graph's input is ``x`` and its output ``y`` (fuzz/targets/tensorflow.py relies on it).
- ``tf_savedmodel/``: SavedModel folders (saved_model.pb, variables/variables.index, variables.data-*): a
  ``tf.Module`` with resource variables (TF2, its signature calls a library function) and a TF1
  ``saved_model.Builder`` graph with VariableV2 and a Switch/Merge cond.

    .venv/bin/python -m fuzz.seeds.tensorflow
"""

from __future__ import annotations

import shutil

import numpy as np

from fuzz.targets import CORPUS


def _tf():
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf.random.set_seed(0)
    return tf


def _frozen(tf, fn, specs, lower: bool = True):
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    concrete = tf.function(fn).get_concrete_function(*specs)
    return convert_variables_to_constants_v2(concrete, lower_control_flow=lower).graph.as_graph_def()


def graphdefs() -> None:
    tf = _tf()
    folder = CORPUS / "tf_graphdef"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    weights = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.5  # noqa: E731
    w, b, fw = weights(3, 3, 3, 4), weights(4), weights(16, 5)
    gamma, beta, mean, var = weights(4) + 1, weights(4), weights(4), np.abs(weights(4)) + 0.5

    def convnet(x):
        y = tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b)
        y = tf.compat.v1.nn.fused_batch_norm(y, gamma, beta, mean, var, is_training=False)[0]
        y = tf.nn.max_pool2d(tf.nn.relu(y), 2, 2, "VALID")
        return tf.identity(tf.nn.softmax(tf.matmul(tf.reshape(y, [1, 16]), fw)), name="y")

    x = tf.TensorSpec((1, 4, 4, 3), tf.float32, name="x")
    (folder / "convnet.pb").write_bytes(_frozen(tf, convnet, [x]).SerializeToString())

    dw = weights(6, 3)

    @tf.function
    def inner(v):
        return tf.nn.relu(tf.matmul(v, dw)) + 1.0

    @tf.function
    def outer(v):
        return inner(v) * 2.0 - tf.reduce_mean(v)

    def nested(x):
        return tf.identity(outer(x), name="y")

    graph_def = tf.function(nested).get_concrete_function(tf.TensorSpec((2, 6), tf.float32, name="x")).graph
    (folder / "functions.pb").write_bytes(graph_def.as_graph_def().SerializeToString())

    cw = weights(4, 3)

    def cond(x, training):
        y = tf.cond(training, lambda: x * 0.5, lambda: tf.nn.relu(x) * 2.0)
        return tf.identity(tf.matmul(y, cw), name="y")

    specs = [tf.TensorSpec((2, 4), tf.float32, name="x"), tf.TensorSpec((), tf.bool, name="training")]
    (folder / "cond_if.pb").write_bytes(_frozen(tf, cond, specs, lower=False).SerializeToString())
    (folder / "cond_switch.pb").write_bytes(_frozen(tf, cond, specs, lower=True).SerializeToString())


class _Module:
    """A tf.Module with two resource variables (built lazily so TensorFlow is imported only when run)."""

    @staticmethod
    def make(tf, rng):
        class Small(tf.Module):
            def __init__(self):
                super().__init__()
                self.kernel = tf.Variable(rng.standard_normal((3, 3, 2, 3)).astype(np.float32), name="kernel")
                self.dense = tf.Variable(rng.standard_normal((3, 4)).astype(np.float32), name="dense")

            @tf.function(input_signature=[tf.TensorSpec((1, 5, 5, 2), tf.float32, name="x")])
            def __call__(self, x):
                y = tf.nn.relu(tf.nn.conv2d(x, self.kernel, 1, "SAME"))
                return tf.matmul(tf.reduce_mean(y, [1, 2]), self.dense)

        return Small()


def saved_models() -> None:
    tf = _tf()
    folder = CORPUS / "tf_savedmodel"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    module = _Module.make(tf, rng)
    tf.saved_model.save(module, str(folder / "module"), signatures=module.__call__)

    v1 = tf.compat.v1
    v1.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
            x = v1.placeholder(tf.float32, [1, 4, 4, 2], name="x")
            flag = v1.placeholder_with_default(False, [], name="training")
            kernel = v1.get_variable("conv/kernel", initializer=rng.standard_normal((2, 2, 2, 3)).astype(np.float32),
                                     use_resource=False)
            dense = v1.get_variable("dense/kernel", initializer=rng.standard_normal((3, 2)).astype(np.float32),
                                    use_resource=True)
            y = tf.nn.conv2d(x, kernel, 1, "VALID")
            y = v1.cond(flag, lambda: y * 0.5, lambda: tf.nn.relu(y))
            y = tf.identity(tf.matmul(tf.reduce_max(y, [1, 2]), dense), name="y")
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(str(folder / "tf1"))
            signature = v1.saved_model.predict_signature_def(inputs={"image": x}, outputs={"scores": y})
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
            builder.save()
    finally:
        v1.enable_control_flow_v2()
    for junk in folder.rglob("fingerprint.pb"):
        junk.unlink()
    for empty in folder.rglob("assets"):
        shutil.rmtree(empty)


def main() -> None:
    graphdefs()
    saved_models()


if __name__ == "__main__":
    main()
