"""What fuzzing the TensorFlow and PyTorch readers found (fuzz/targets/tensorflow.py, fuzz/targets/pytorch.py),
each input regenerated here: a zip whose end record puts a member's local header before the start of the file
(an OSError from seek), a deflated member whose stream is damaged (zlib.error), a declared tensor whose byte count
no float holds (OverflowError in the size message), a FusedBatchNorm with a negative variance (NumPy's sqrt
warning) and one whose huge scale overflows float32 when folded into the conv (NumPy's cast warning). Each must be
a one-line PegasusError (the CLI's exit 2), or, for the fold, a clean import."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pegasus.errors import PegasusError
from tests.security.harness import assert_refused, run_many
from tests.support.requirements import need_module


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def _torch_save_like() -> dict[str, bytes]:
    return {"m/data.pkl": b"\x80\x02}q\x00.", "m/version": b"3\n", "m/byteorder": b"little"}


def test_zip_faults_are_one_line(tmp_path: Path) -> None:
    # the end record's central-directory offset 100 bytes too far: zipfile puts the first local header at -100
    data = bytearray(_zip(_torch_save_like()))
    end = data.rfind(b"PK\x05\x06")
    offset = struct.unpack_from("<I", data, end + 16)[0]
    struct.pack_into("<I", data, end + 16, offset + 100)
    (tmp_path / "offset.pt").write_bytes(bytes(data))
    # a deflated member whose compressed bytes are not a deflate stream (sizes and headers consistent)
    members = {**_torch_save_like(), "m/data.pkl": b"\x80\x02}q\x00." * 50}
    data = bytearray(_zip(members, zipfile.ZIP_DEFLATED))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo("m/data.pkl")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start:start + info.compress_size] = b"\xff" * info.compress_size
    (tmp_path / "deflate.pt").write_bytes(bytes(data))
    results = run_many([["import", "pytorch", "--model", str(tmp_path / name), "--output-model",
                         str(tmp_path / "o.json"), "--output-data", str(tmp_path / "o.data")]
                        for name in ("offset.pt", "deflate.pt")], cwd=tmp_path)
    assert_refused(results[0], "offset.pt", "local header offset points before the start")
    assert_refused(results[1], "deflate.pt", "data.pkl cannot be read")


def test_size_message_for_a_byte_count_no_float_holds() -> None:
    from pegasus.limits import check_tensor

    with pytest.raises(PegasusError, match=r"needs about 2\^1202 bytes, more than the") as caught:
        check_tensor([2**400] * 3, 4, "'w'", "m.pt2")
    assert "\n" not in str(caught.value)


def _frozen_batchnorm(tf, variance: np.ndarray, scale: np.ndarray) -> bytes:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    w = np.full((1, 1, 2, 2), 4.0, np.float32)
    zeros = np.zeros(2, np.float32)

    def fn(x):
        y = tf.nn.conv2d(x, w, 1, "VALID")
        return tf.identity(tf.compat.v1.nn.fused_batch_norm(y, scale, zeros, zeros, variance, epsilon=1e-3,
                                                            is_training=False)[0], name="y")

    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec((1, 3, 3, 2), tf.float32, name="x"))
    return convert_variables_to_constants_v2(concrete).graph.as_graph_def().SerializeToString()


def test_batch_norm_constants_from_the_file(tmp_path: Path) -> None:
    tf = need_module("tensorflow")
    from pegasus.importers.tensorflow.loader import import_tensorflow

    ones = np.ones(2, np.float32)
    (tmp_path / "negative.pb").write_bytes(_frozen_batchnorm(tf, np.array([1.0, -5.0], np.float32), ones))
    with pytest.raises(PegasusError, match="variance has negative values") as caught:
        import_tensorflow(tmp_path / "negative.pb", inputs=["x"], outputs=["y"])
    assert "FusedBatchNorm" in str(caught.value) and "negative.pb" in str(caught.value)
    # a scale of 3e38 folds into weights of 4 as inf (float32), what TensorFlow computes too (no NumPy warning)
    (tmp_path / "huge.pb").write_bytes(_frozen_batchnorm(tf, ones, np.array([3e38, 1.0], np.float32)))
    graph = import_tensorflow(tmp_path / "huge.pb", inputs=["x"], outputs=["y"])
    assert graph.outputs == ["y"]


def test_nodes_checked_against_their_op_definition(tmp_path: Path) -> None:
    """A node missing a data input or a required attribute (what dropping one field of a GraphDef does) is refused
    naming the node before any converter indexes its inputs."""
    tf = need_module("tensorflow")
    from tensorflow.core.framework import graph_pb2

    from pegasus.importers.tensorflow.loader import import_tensorflow

    graph = graph_pb2.GraphDef.FromString(_frozen_batchnorm(tf, np.ones(2, np.float32), np.ones(2, np.float32)))
    conv = next(n for n in graph.node if n.op == "Conv2D")
    del conv.input[1]
    (tmp_path / "input.pb").write_bytes(graph.SerializeToString())
    conv.input.append(graph.node[1].name)
    del conv.attr["strides"]
    (tmp_path / "attr.pb").write_bytes(graph.SerializeToString())
    with pytest.raises(PegasusError, match=r"node 'Conv2D' \(Conv2D\) has 1 data input\(s\) but a Conv2D takes 2"):
        import_tensorflow(tmp_path / "input.pb", inputs=["x"], outputs=["y"])
    with pytest.raises(PegasusError, match="has no value for its attribute 'strides'"):
        import_tensorflow(tmp_path / "attr.pb", inputs=["x"], outputs=["y"])
