"""Builders of the TensorFlow importer tests' models: ``tf.function`` graphs frozen with
``convert_variables_to_constants_v2`` (one per op family, random weights), SavedModels of a ``tf.Module`` and of
a Keras model, TF1 graphs with variables (a ``tf.compat.v1.train.Saver`` checkpoint beside its ``.meta``, and a
``tf.compat.v1.saved_model.Builder`` SavedModel), TF1 ``tf.cond`` (Switch/Merge). Each writes the model and
TensorFlow's own outputs on random inputs into a folder (harness.save_case); harness.cached_case caches it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.importers.tensorflow.harness import save_case
from tests.importers.tflite.convert import seeded, tensorflow


def _freeze(folder: Path, fn, shapes, *, low: float = -3.0, high: float = 3.0, seed: int = 0, reference=None,
            dtypes=None, shapes_fed=None) -> None:
    """Freeze ``fn`` traced for inputs of ``shapes`` into folder/model.pb with TensorFlow's outputs on random
    inputs (computed by ``reference`` instead when given: the same function in a form TensorFlow's CPU kernels
    run, e.g. NHWC for an NCHW graph)."""
    tf = tensorflow()
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    dtypes = dtypes or ["float32"] * len(shapes)
    specs = [tf.TensorSpec(shape, getattr(tf, dtype), name=f"x{i}") for i, (shape, dtype) in
             enumerate(zip(shapes, dtypes))]
    concrete = tf.function(fn).get_concrete_function(*specs)
    frozen = convert_variables_to_constants_v2(concrete)
    (folder / "model.pb").write_bytes(frozen.graph.as_graph_def().SerializeToString())
    # TensorFlow's answer from its own kernels on the inputs (the frozen function, or ``reference``)
    rng = np.random.default_rng(seed)
    feeds = [rng.uniform(low, high, shape).astype(dtype) for shape, dtype in zip(shapes_fed or shapes, dtypes)]
    outputs = (reference or frozen)(*[tf.constant(f) for f in feeds])
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]

    def name(tensor) -> str:
        node, _, index = tensor.name.partition(":")
        return node if index == "0" else tensor.name

    inputs, outs = [name(t) for t in frozen.inputs], [name(t) for t in frozen.outputs]
    save_case(folder, "model.pb", {"inputs": inputs, "outputs": outs}, dict(zip(inputs, feeds)),
              {n: np.asarray(o) for n, o in zip(outs, outputs)})


def _weights(*shape: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32) * 0.5


def conv_ops(folder: Path) -> None:
    """Conv2D (SAME, VALID, strided, dilated, explicit paddings, grouped) + BiasAdd, DepthwiseConv2dNative,
    Conv2DBackpropInput (SAME, VALID, explicit paddings), FusedBatchNormV3 after a conv and on its own."""
    tf = tensorflow()
    w, w2, wg = _weights(3, 3, 4, 6), _weights(2, 2, 4, 5), _weights(3, 3, 2, 6)
    dw, wt = _weights(3, 3, 4, 2), _weights(3, 3, 3, 4)
    bias = _weights(6)
    gamma, beta, mean, var = _weights(6) + 1.0, _weights(6), _weights(6), np.abs(_weights(6)) + 0.5

    def fn(x):
        same = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), bias))
        normed = tf.compat.v1.nn.fused_batch_norm(same, gamma, beta, mean, var, epsilon=1e-3, is_training=False)[0]
        folded = tf.compat.v1.nn.fused_batch_norm(tf.nn.conv2d(x, w, 1, "VALID"), gamma, beta, mean, var,
                                                  is_training=False)[0]
        strided = tf.nn.conv2d(x, w2, 2, "VALID")
        dilated = tf.nn.conv2d(x, w, 1, "SAME", dilations=2)
        explicit = tf.nn.conv2d(x, w, [1, 2, 1, 1], [[0, 0], [1, 2], [2, 0], [0, 0]])
        grouped = tf.nn.conv2d(x, wg, 1, "SAME")
        depthwise = tf.nn.depthwise_conv2d(x, dw, [1, 2, 2, 1], "SAME")
        up_same = tf.nn.conv2d_transpose(x, wt, [1, 18, 18, 3], 2, "SAME")
        up_valid = tf.nn.conv2d_transpose(x, wt, [1, 20, 20, 3], 2, "VALID")
        up_explicit = tf.nn.conv2d_transpose(x, wt, [1, 17, 18, 3], 2, [[0, 0], [1, 1], [1, 0], [0, 0]])
        return normed, folded, strided, dilated, explicit, grouped, depthwise, up_same, up_valid, up_explicit

    _freeze(folder, fn, [(1, 9, 9, 4)])


def conv_nchw(folder: Path) -> None:
    """Conv2D, BiasAdd, FusedBatchNormV3, MaxPool and AvgPool with data_format NCHW (TensorFlow's CPU kernels
    refuse NCHW convolutions and pools, so TensorFlow's answer comes from the NHWC graph between transposes)."""
    tf = tensorflow()
    w, bias = _weights(3, 3, 3, 4), _weights(4)
    gamma, beta, mean, var = _weights(4) + 1.0, _weights(4), _weights(4), np.abs(_weights(4)) + 0.5

    def make(data_format: str):
        def fn(x):
            y = tf.nn.conv2d(x, w, [1, 1, 2, 2] if data_format == "NCHW" else 2, "SAME", data_format=data_format)
            y = tf.nn.bias_add(y, bias, data_format=data_format)
            y = tf.compat.v1.nn.fused_batch_norm(y, gamma, beta, mean, var, is_training=False,
                                                 data_format=data_format)[0]
            ksize = [1, 1, 2, 2] if data_format == "NCHW" else [1, 2, 2, 1]
            return (tf.nn.max_pool2d(y, ksize, ksize, "VALID", data_format=data_format),
                    tf.nn.avg_pool2d(y, ksize, [1, 1, 1, 1], "SAME", data_format=data_format))
        return fn

    nhwc = make("NHWC")

    def reference(x):
        outs = nhwc(tf.transpose(x, [0, 2, 3, 1]))
        return [tf.transpose(y, [0, 3, 1, 2]) for y in outs]

    _freeze(folder, make("NCHW"), [(1, 3, 10, 10)], reference=reference)


def linear_ops(folder: Path) -> None:
    """MatMul (transpose_a/b), BatchMatMulV2 (adj_x/adj_y), Einsum in matrix-product forms."""
    tf = tensorflow()
    w, wt = _weights(6, 5), _weights(5, 6)
    k = _weights(4, 6, 3)

    def fn(a, b, c):
        mm = tf.matmul(a, w)                                   # (3, 6) @ (6, 5)
        mm_t = tf.matmul(a, wt, transpose_b=True)
        mm_a = tf.matmul(tf.transpose(a), w, transpose_a=True)  # (a^T)^T @ w: MatMul with transpose_a
        bmm = tf.matmul(b, c)                                  # (2, 4, 6) @ (2, 6, 3)
        bmm_adj = tf.linalg.matmul(c, b, adjoint_a=True, adjoint_b=True)
        e1 = tf.einsum("bij,bjk->bik", b, c)
        e2 = tf.einsum("abc,cd->abd", b, _weights(6, 7))
        e3 = tf.einsum("bqd,bkd->bqk", b, tf.transpose(c, [0, 2, 1]))
        e4 = tf.einsum("ij,jk", a, w)
        e5 = tf.einsum("...ij,jk->...ik", b, w)
        e6 = tf.einsum("bij->bji", b)
        e7 = tf.einsum("aij,jkl->aikl", b, k.transpose(1, 0, 2))
        return mm, mm_t, mm_a, bmm, bmm_adj, e1, e2, e3, e4, e5, e6, e7

    _freeze(folder, fn, [(3, 6), (2, 4, 6), (2, 6, 3)])


def unary_ops(folder: Path) -> None:
    """The one-input ops: activations and math functions (positive inputs where the function needs them)."""
    tf = tensorflow()

    def fn(x):
        positive = tf.abs(x) + 0.5
        return (tf.nn.relu(x), tf.nn.relu6(x * 3), tf.nn.elu(x), tf.nn.selu(x), tf.nn.leaky_relu(x, 0.3),
                tf.nn.leaky_relu(x), tf.sigmoid(x), tf.tanh(x), tf.exp(x), tf.math.log(positive), tf.sqrt(positive),
                tf.math.rsqrt(positive), tf.square(x), tf.abs(x), tf.negative(x), tf.nn.softplus(x),
                tf.nn.softsign(x), tf.floor(x), tf.math.reciprocal(positive), tf.identity(x), tf.stop_gradient(x))

    _freeze(folder, fn, [(2, 5, 7)])


def binary_ops(folder: Path) -> None:
    """The two-input ops with broadcasting, AddN, SquaredDifference, Pow, comparisons feeding Select."""
    tf = tensorflow()
    c = _weights(7)

    def fn(x, y):
        positive = tf.abs(x) + 0.5
        return (tf.add(x, y), tf.raw_ops.Add(x=x, y=c), x - c, x * y, tf.math.truediv(x, tf.abs(y) + 0.5),
                tf.maximum(x, y), tf.minimum(x, c), tf.math.squared_difference(x, y), tf.pow(positive, y),
                tf.add_n([x, x * y, x]), tf.where(x > y, x, y), tf.where(tf.logical_and(x >= 0.0, y < 0.0), x, c),
                tf.cast(tf.equal(tf.round(x), 1.0), tf.float32), tf.math.floordiv(x, 0.7),
                tf.math.floormod(x, 0.7))

    _freeze(folder, fn, [(2, 3, 7), (3, 7)])


def reduce_ops(folder: Path) -> None:
    """Mean, Sum, Max, Min, Prod (keep_dims both ways), ArgMax (int64, int32), ArgMin, Softmax, LogSoftmax."""
    tf = tensorflow()

    def fn(x):
        return (tf.reduce_mean(x, [1, 2]), tf.reduce_sum(x, -1, keepdims=True), tf.reduce_max(x, 1),
                tf.reduce_min(x, [0, 2], keepdims=True), tf.reduce_prod(x * 0.5, 2), tf.argmax(x, 2),
                tf.argmax(x, 1, output_type=tf.int32), tf.argmin(x, 0), tf.nn.softmax(x), tf.nn.log_softmax(x),
                tf.reduce_mean(x, [1, 2], keepdims=True))

    _freeze(folder, fn, [(2, 4, 6)])


def pool_ops(folder: Path) -> None:
    """MaxPool and AvgPool (NHWC; AvgPool's SAME border averages only the pixels inside)."""
    tf = tensorflow()

    def fn(x):
        return (tf.nn.max_pool2d(x, 2, 2, "VALID"), tf.nn.max_pool2d(x, 3, 2, "SAME"),
                tf.nn.avg_pool2d(x, 3, 1, "SAME"), tf.nn.avg_pool2d(x, [2, 3], [2, 1], "VALID"))

    _freeze(folder, fn, [(1, 9, 8, 3)])


def shape_ops(folder: Path) -> None:
    """ConcatV2, Reshape (a Shape chain), Squeeze, ExpandDims, Transpose, StridedSlice with every mask, Slice,
    Split, SplitV, Pack, Unpack, Tile, Fill, GatherV2, Cast."""
    tf = tensorflow()

    def fn(x):
        batch = tf.shape(x)[0]
        flat = tf.reshape(x, [batch, -1])                      # Shape -> StridedSlice -> Pack -> Reshape
        parts = tf.split(x, 2, axis=3)
        sizes = tf.split(x, [1, -1, 2], axis=1)
        unpacked = tf.unstack(x, axis=2)
        return (tf.concat([x, x * 2], -1), flat, tf.squeeze(x[:, :1], [1]), tf.expand_dims(x, 1),
                tf.transpose(x, [0, 3, 1, 2]), x[:, 1:4:2, ::-1, 2], x[..., tf.newaxis, 1:], x[0, -2:, :, 1:3],
                tf.slice(x, [0, 1, 0, 1], [1, 3, -1, 2]), parts[1], sizes[1], sizes[2], tf.stack(unpacked, axis=1),
                unpacked[2], tf.tile(x, [1, 2, 1, 1]), tf.fill(tf.shape(x)[1:3], 1.5) + x[0, :, :, 0],
                tf.gather(x, [3, 0, 3], axis=3), tf.cast(x * 3, tf.int32), tf.zeros_like(x) + tf.ones_like(x))

    _freeze(folder, fn, [(1, 5, 4, 4)])


def movement_ops(folder: Path) -> None:
    """Pad, PadV2, MirrorPad (REFLECT, SYMMETRIC), ResizeBilinear and ResizeNearestNeighbor (every flag
    combination), DepthToSpace, SpaceToDepth."""
    tf = tensorflow()
    raw = tf.raw_ops

    def fn(x):
        resized = []
        for align, half in ((False, False), (True, False), (False, True)):
            resized.append(raw.ResizeBilinear(images=x, size=[11, 7], align_corners=align, half_pixel_centers=half))
            resized.append(raw.ResizeNearestNeighbor(images=x, size=[9, 13], align_corners=align,
                                                     half_pixel_centers=half))
        return (tf.pad(x, [[0, 0], [1, 2], [0, 1], [0, 0]]), tf.pad(x, [[0, 0], [2, 0], [1, 1], [0, 0]],
                                                                    constant_values=-1.5),
                tf.pad(x, [[0, 0], [2, 1], [1, 2], [0, 0]], "REFLECT"),
                tf.pad(x, [[0, 0], [1, 2], [3, 0], [0, 0]], "SYMMETRIC"),
                tf.nn.depth_to_space(x, 2), tf.nn.space_to_depth(x, 2), *resized)

    _freeze(folder, fn, [(1, 6, 4, 8)])


def small_cnn(folder: Path) -> None:
    """A small Keras CNN (conv, batch norm, depthwise, pooling, dense) frozen; the TFLite comparison converts the
    same model."""
    tf = seeded(3)
    model = _small_cnn_model(tf)
    _freeze(folder, lambda x: model(x, training=False), [(1, 12, 12, 3)])
    (folder / "model.tflite").write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    model.save(folder / "model.keras")


def _small_cnn_model(tf):
    layers = tf.keras.layers
    inputs = tf.keras.Input((12, 12, 3))
    x = layers.Conv2D(8, 3, padding="same", use_bias=False)(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU(6.0)(x)
    x = layers.DepthwiseConv2D(3, strides=2, padding="same")(x)
    x = layers.Conv2D(12, 1, activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(5, activation="softmax")(x)
    model = tf.keras.Model(inputs, outputs)
    rng = np.random.default_rng(4)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            layer.set_weights([rng.uniform(0.5, 1.5, 8).astype(np.float32), rng.uniform(-0.2, 0.2, 8).astype(
                np.float32), rng.uniform(-0.2, 0.2, 8).astype(np.float32), rng.uniform(0.5, 1.5, 8).astype(np.float32)])
    return model


# ---- SavedModels and TF1 graphs with variables ------------------------------------------------------------
def module_saved_model(folder: Path) -> None:
    """tf.saved_model.save of a tf.Module: variables, a conv, a dense layer, two named outputs."""
    tf = tensorflow()

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.kernel = tf.Variable(_weights(3, 3, 2, 4), name="kernel")
            self.bias = tf.Variable(_weights(4), name="bias")
            self.dense = tf.Variable(_weights(4, 3), name="dense")

        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 2], tf.float32, name="image")])
        def __call__(self, image):
            y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(image, self.kernel, 1, "SAME"), self.bias))
            pooled = tf.reduce_mean(y, [1, 2])
            return {"features": y, "scores": tf.nn.softmax(tf.matmul(pooled, self.dense))}

    net = Net()
    tf.saved_model.save(net, str(folder / "saved"))
    image = np.random.default_rng(5).uniform(-2, 2, (1, 8, 8, 2)).astype(np.float32)
    expected = {k: v.numpy() for k, v in net(tf.constant(image)).items()}
    save_case(folder, "saved", {}, {"image": image}, expected)


def keras_saved_model(folder: Path) -> None:
    """Keras 3's model.export (a SavedModel with 'serve' and 'serving_default' signatures)."""
    tf = seeded(6)
    model = _small_cnn_model(tf)
    model.export(str(folder / "saved"), verbose=False)
    image = np.random.default_rng(6).uniform(-2, 2, (1, 12, 12, 3)).astype(np.float32)
    key = model.inputs[0].name
    save_case(folder, "saved", {}, {key: image}, {"output_0": model(image, training=False).numpy()})


def _tf1_graph(tf, rng):
    """A TF1 graph: VariableV2 and resource variables, a conv, a fused batch norm, a dense layer, and a tf.cond
    (Switch/Merge) on a training flag (a bool placeholder) and one on a placeholder with a default."""
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float32, [None, 6, 6, 3], name="x")
    is_training = v1.placeholder(tf.bool, [], name="is_training")
    scale_up = v1.placeholder_with_default(False, [], name="scale_up")
    kernel = v1.get_variable("conv/kernel", initializer=rng.standard_normal((3, 3, 3, 4)).astype(np.float32),
                             use_resource=False)
    gamma = v1.get_variable("bn/gamma", initializer=rng.uniform(0.5, 1.5, 4).astype(np.float32), use_resource=True)
    beta = v1.get_variable("bn/beta", initializer=rng.uniform(-0.5, 0.5, 4).astype(np.float32), use_resource=False)
    mean = v1.get_variable("bn/mean", initializer=rng.uniform(-0.5, 0.5, 4).astype(np.float32), use_resource=False)
    var = v1.get_variable("bn/variance", initializer=rng.uniform(0.5, 1.5, 4).astype(np.float32), use_resource=False)
    dense = v1.get_variable("dense/kernel", initializer=rng.standard_normal((4, 5)).astype(np.float32),
                            use_resource=True)
    y = tf.nn.conv2d(x, kernel, 1, "SAME")
    y = v1.nn.fused_batch_norm(y, gamma, beta, mean, var, is_training=False)[0]
    y = v1.cond(is_training, lambda: y * 0.5, lambda: tf.nn.relu(y))
    y = v1.cond(scale_up, lambda: y * 10.0, lambda: y + 1.0)
    pooled = tf.reduce_max(y, [1, 2])
    return x, is_training, tf.identity(tf.matmul(pooled, dense), name="y")


def tf1_checkpoint(folder: Path) -> None:
    """A TF1 graph with variables saved by tf.compat.v1.train.Saver (model.meta + checkpoint); its training flag
    comes from a predef file whose 'map' names it."""
    tf = tensorflow()
    v1 = tf.compat.v1
    rng = np.random.default_rng(7)
    v1.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
            x, is_training, y = _tf1_graph(tf, rng)
            session.run(v1.global_variables_initializer())
            v1.train.Saver().save(session, str(folder / "model"))
            image = rng.uniform(-2, 2, (2, 6, 6, 3)).astype(np.float32)
            expected = session.run(y, {x: image, is_training: False})
            scaled = session.run(y, {x: image, is_training: False, graph.get_tensor_by_name("scale_up:0"): True})
    finally:
        v1.enable_control_flow_v2()
    np.savez(folder / "prd.npz", training=False, map={"training": "is_training"})
    np.savez(folder / "scaled.npz", y=scaled)
    save_case(folder, "model.meta", {"inputs": ["x"], "outputs": ["y"], "input_shapes": [[2, 6, 6, 3]]},
              {"x": image}, {"y": expected})


def tf1_saved_model(folder: Path) -> None:
    """The same TF1 graph as a SavedModel written by tf.compat.v1.saved_model.Builder with a predict signature."""
    tf = tensorflow()
    v1 = tf.compat.v1
    rng = np.random.default_rng(8)
    v1.disable_control_flow_v2()
    try:
        with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
            x, is_training, y = _tf1_graph(tf, rng)
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(str(folder / "saved"))
            signature = v1.saved_model.predict_signature_def(inputs={"image": x}, outputs={"scores": y})
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
            builder.save()
            image = rng.uniform(-2, 2, (1, 6, 6, 3)).astype(np.float32)
            expected = session.run(y, {x: image, is_training: True})
    finally:
        v1.enable_control_flow_v2()
    np.savez(folder / "prd.npz", is_training=True)
    save_case(folder, "saved", {}, {"image": image}, {"scores": expected})


def unsupported_ops(folder: Path) -> None:
    """A graph with two ops pegasus does not convert (Cumsum, TopKV2) among supported ones."""
    tf = tensorflow()

    def fn(x):
        return tf.nn.relu(tf.math.cumsum(x, axis=1)) + tf.math.top_k(x, 3).values[:, :1]

    _freeze(folder, fn, [(2, 5)])


def dynamic_shape(folder: Path) -> None:
    """An input whose height is unknown (None): it needs --input-size-list."""
    tf = tensorflow()
    _freeze(folder, lambda x: tf.reduce_sum(x * 2.0, 1), [(1, None, 3)], shapes_fed=[(1, 5, 3)])


def training_flag(folder: Path) -> None:
    """A tf.function taking a bool ``training`` input that a tf.cond reads, frozen twice: with control flow
    lowered to Switch/Merge (model.pb) and kept as StatelessIf with branch functions (model_if.pb)."""
    tf = tensorflow()
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    w = _weights(4, 3)

    def fn(x, training):
        y = tf.cond(training, lambda: tf.nn.dropout(x, 0.5, seed=1), lambda: tf.nn.relu(x) * 2.0)
        return tf.matmul(y, w)

    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec((2, 4), tf.float32, name="x"),
                                                     tf.TensorSpec((), tf.bool, name="training"))
    for name, lower in (("model.pb", True), ("model_if.pb", False)):
        frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=lower)
        (folder / name).write_bytes(frozen.graph.as_graph_def().SerializeToString())
    x = np.random.default_rng(10).uniform(-2, 2, (2, 4)).astype(np.float32)
    expected = frozen(tf.constant(x), tf.constant(False))[0].numpy()
    np.savez(folder / "prd.npz", training=False)
    save_case(folder, "model.pb", {"inputs": ["x"], "outputs": ["Identity"]}, {"x": x}, {"Identity": expected})
