"""The pieces of TensorFlow the reader uses, imported on first use: the protobuf classes (GraphDef, SavedModel,
MetaGraphDef, TrackableObjectGraph, the checkpoint index's BundleHeaderProto/BundleEntryProto), ``MakeNdarray``
(TensorProto -> NumPy, called only after tensors.py has checked the declared size) and the op registry's OpDefs
(how many outputs a node has and of which types). Nothing here runs a model's graph, and no TensorFlow C++ reader
sees model bytes: checkpoints are read by checkpoint.py.

TensorFlow is an optional extra (``pip install 'pegasus-nn[tensorflow]'``); its import prints C++ start-up lines
on stderr (CUDA stubs, absl), which would break pegasus's one-line errors, so file descriptor 2 is pointed at
/dev/null while it loads.
"""

from __future__ import annotations

import functools
import os
import sys
from contextlib import contextmanager
from types import SimpleNamespace

from pegasus.errors import PegasusError


@contextmanager
def _quiet_stderr():
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@functools.cache
def tensorflow() -> SimpleNamespace:
    """TensorFlow's protobuf modules and data utilities (imported once per process)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        with _quiet_stderr():
            from tensorflow.core.framework import graph_pb2
            from tensorflow.core.protobuf import (
                meta_graph_pb2,
                saved_model_pb2,
                tensor_bundle_pb2,
                trackable_object_graph_pb2,
            )
            from tensorflow.python.framework import op_def_registry, tensor_util
    except ImportError as exc:
        raise PegasusError(f"importing TensorFlow models needs TensorFlow ({exc}): "
                           "pip install 'pegasus-nn[tensorflow]'") from None
    from google.protobuf import message, text_format

    return SimpleNamespace(GraphDef=graph_pb2.GraphDef, MetaGraphDef=meta_graph_pb2.MetaGraphDef,
                           SavedModel=saved_model_pb2.SavedModel,
                           TrackableObjectGraph=trackable_object_graph_pb2.TrackableObjectGraph,
                           make_ndarray=tensor_util.MakeNdarray, op_def=op_def_registry.get,
                           BundleHeaderProto=tensor_bundle_pb2.BundleHeaderProto,
                           BundleEntryProto=tensor_bundle_pb2.BundleEntryProto,
                           DecodeError=message.DecodeError, text_format=text_format)
