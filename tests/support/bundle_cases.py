"""Single-op graphs compiled into host bundles and compared with the reference interpreter: ``Case`` (one op,
its inputs and tolerance), building the graph, running many cases in one bundle, the check, and the unary and Cast
cases. The table-driven base of the kernel tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pegasus.ir.graph import Graph, Node
from pegasus.ir.tensor import Tensor, TensorType
from pegasus.ir.verify import verify
from pegasus.ops.registry import get_op, make_attrs
from pegasus.runtime import interpreter
from tests.support.host_runner import run_bundle_host

RNG = np.random.default_rng(7)


@dataclass
class Case:
    """One layer: op, attributes and input arrays (positions in ``constant`` become constants,
    None is an omitted optional input); ``outputs`` names which outputs the layer has (default all)."""

    id: str
    op: str
    inputs: list[np.ndarray | None]
    attrs: dict = field(default_factory=dict)
    constant: tuple[int, ...] = ()
    outputs: tuple[bool, ...] | None = None
    rtol: float = 1e-4
    atol: float = 1e-5


def add_layer(graph: Graph, index: int, case: Case, feeds: dict[str, np.ndarray]) -> None:
    names = []
    for position, value in enumerate(case.inputs):
        name = f"c{index}_x{position}" if value is not None else ""
        if value is None:
            pass
        elif position in case.constant:
            graph.tensors[name] = Tensor.constant(name, value)
        else:
            graph.tensors[name] = Tensor(name, TensorType.of(value))
            graph.inputs.append(name)
            feeds[name] = value
        names.append(name)
    attrs = make_attrs(case.op, **case.attrs)
    types = get_op(case.op).infer(attrs, [graph.type_of(n) if n else None for n in names])
    wanted = case.outputs or (True,) * len(types)
    outputs = [f"c{index}_y{j}" if keep else "" for j, keep in enumerate(wanted)]
    for name, ttype in zip(outputs, types):
        if name:
            graph.tensors[name] = Tensor(name, ttype)
            graph.outputs.append(name)
    graph.nodes.append(Node(f"c{index}_{case.op}", case.op, attrs, names, outputs))


def build_graph(cases: list[Case]) -> tuple[Graph, dict[str, np.ndarray]]:
    graph, feeds = Graph("kernels"), {}
    for index, case in enumerate(cases):
        add_layer(graph, index, case, feeds)
    verify(graph)
    return graph, feeds


def run_cases(cases: list[Case], tmp_path, per_bundle: int = 24) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Export the cases as bundles of ``per_bundle`` layers (LLVM's time grows faster than linearly with
    one huge entry function), run each once; per case id: [(bundle output, reference output)]."""
    results = {}
    for start in range(0, len(cases), per_bundle):
        chunk = cases[start:start + per_bundle]
        graph, feeds = build_graph(chunk)
        with np.errstate(all="ignore"):
            expected = interpreter.run(graph, feeds)
        folder = tmp_path / f"bundle{start}"
        folder.mkdir()
        actual = run_bundle_host(graph, feeds, workdir=folder)
        for index, case in enumerate(chunk):
            names = [n for n in graph.outputs if n.startswith(f"c{index}_y")]
            results[case.id] = [(actual[n], expected[n]) for n in names]
    return results


def check_case(results: dict, case: Case) -> None:
    for got, want in results[case.id]:
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype.kind == "f":
            with np.errstate(invalid="ignore"):   # float16 NaN payloads widen noisily
                got, want = got.astype(np.float64), want.astype(np.float64)
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
        else:
            np.testing.assert_array_equal(got, want)


def ids(cases: list[Case]) -> list[str]:
    return [case.id for case in cases]


def floats_with_ties(shape=(3, 37), scale=3.0) -> np.ndarray:
    x = (RNG.standard_normal(shape) * scale).astype(np.float32)
    x.flat[:8] = [0.5, 1.5, 2.5, -0.5, -2.5, 0.0, -0.0, 3.0]   # ties for Round, zeros, an integer
    return x


X = floats_with_ties()


POSITIVE = np.abs(X) + np.float32(0.01)


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 1e30, -1e-30, 2.0], np.float32)


FLOAT_OPS = ["Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu",
             "ThresholdedRelu", "Shrink", "Softplus", "Softsign", "Mish", "Swish", "Gelu", "Erf", "Reciprocal",
             "Tanh", "Exp", "Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Atan"]


UNARY_CASES = (
    [Case(f"{op}-f32", op, [X]) for op in FLOAT_OPS]
    + [Case(f"{op}-f32", op, [POSITIVE]) for op in ("Log", "Sqrt")]
    + [Case("Tan-f32", "Tan", [np.clip(X, -1.4, 1.4)])]
    + [Case(f"{op}-special", op, [SPECIAL]) for op in ("IsNaN", "IsInf", "Relu", "Abs", "Sign", "Sigmoid", "Tanh",
                                                       "Exp", "Softplus", "Clip")]
    + [
        Case("IsInf-positive-only", "IsInf", [SPECIAL], {"detect_negative": 0}),
        Case("IsInf-negative-only", "IsInf", [SPECIAL], {"detect_positive": 0}),
        Case("LeakyRelu-alpha", "LeakyRelu", [X], {"alpha": 0.2}),
        Case("Clip-min", "Clip", [X], {"min": -1.0}),
        Case("Clip-max", "Clip", [X], {"max": 0.5}),
        Case("Clip-both", "Clip", [X], {"min": -0.25, "max": 2.0}),
        Case("HardSigmoid-attrs", "HardSigmoid", [X], {"alpha": 0.3, "beta": 0.4}),
        Case("Elu-alpha", "Elu", [X], {"alpha": 0.5}),
        Case("Selu-attrs", "Selu", [X], {"alpha": 2.0, "gamma": 3.0}),
        Case("Celu-alpha", "Celu", [X], {"alpha": 2.0}),
        Case("ThresholdedRelu-alpha", "ThresholdedRelu", [X], {"alpha": 0.5}),
        Case("Shrink-attrs", "Shrink", [X], {"bias": 0.3, "lambd": 1.0}),
        Case("Swish-alpha", "Swish", [X], {"alpha": 1.5}),
        Case("Gelu-tanh", "Gelu", [X], {"approximate": "tanh"}),
        Case("Exp-rank0", "Exp", [np.array(0.5, np.float32)]),
        Case("Relu-4d", "Relu", [floats_with_ties((2, 3, 5, 7))]),
        Case("Not-bool", "Not", [X > 0]),
    ]
    + [Case(f"{op}-{dtype}", op, [RNG.integers(-120, 120, 29).astype(dtype)])
       for op in ("Relu", "Abs", "Neg", "Sign") for dtype in ("int8", "int32", "int64")]
    + [
        Case("Abs-int8-min", "Abs", [np.array([-128, 127, -1, 0], np.int8)]),
        Case("Neg-int8-min", "Neg", [np.array([-128, 127, -1, 0], np.int8)]),
        Case("Abs-uint8", "Abs", [np.arange(250, 256, dtype=np.uint8)]),
        Case("Sign-uint8", "Sign", [np.arange(0, 6, dtype=np.uint8)]),
        Case("Clip-int32", "Clip", [RNG.integers(-9, 9, 31).astype(np.int32)], {"min": -2.5, "max": 3.5}),
        Case("Clip-uint8", "Clip", [np.arange(0, 256, 7, dtype=np.uint8)], {"min": 10.0, "max": 200.0}),
    ]
    + [Case(f"{op}-f16", op, [X.astype(np.float16)]) for op in ("Relu", "Abs", "Neg", "Clip", "Floor", "Sign")]
    # NumPy rounds every intermediate of a float16 formula to float16; the bundle only its result
    + [Case(f"{op}-f16", op, [X.astype(np.float16)], rtol=2e-3, atol=1e-3) for op in ("Sigmoid", "Exp", "Tanh")]
    + [Case(f"{op}-f64", op, [X.astype(np.float64)]) for op in ("Relu", "Abs", "Neg", "LeakyRelu", "HardSigmoid")]
)


CAST_DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
               "uint64", "bool"]


def cast_source(dtype: str) -> np.ndarray:
    """In-range values with fractions, negatives, wrap-arounds and values float16 must round."""
    values = np.array([0, 1, -1, 2.5, -2.5, 3.7, -3.7, 100.25, -128, 127, 255, 300, -129, 65504, 70000,
                       -70000, 16777217, 2 ** 30, 0.1, 1e-3], np.float64)
    if dtype == "bool":
        return values != 0
    if dtype == "float16":
        values = values[np.abs(values) <= 65504]
    if np.dtype(dtype).kind in "iu":
        return values.astype(np.int64).astype(dtype)
    return values.astype(dtype)


CAST_CASES = [Case(f"Cast-{src}-{dst}", "Cast", [cast_source(src)], {"to": dst})
              for src in CAST_DTYPES for dst in CAST_DTYPES if src != dst]


ALL_HALVES = np.arange(65536, dtype=np.uint16).view(np.float16)
with np.errstate(invalid="ignore"):
    HALF_TIES = np.concatenate([ALL_HALVES.astype(np.float32) * np.float32(1 + 2 ** -11),  # halfway between
                                ALL_HALVES.astype(np.float32) * np.float32(1 + 2 ** -12),
                                np.float32([65519.99, 65520, 1e6, -1e6, 2 ** -25, 2 ** -26, 3 * 2 ** -26, np.nan])])
CAST_CASES += [
    Case("Cast-all-float16-to-float32", "Cast", [ALL_HALVES], {"to": "float32"}),
    Case("Cast-float32-to-float16-rounding", "Cast", [HALF_TIES], {"to": "float16"}, rtol=0, atol=0),
]

CASES = UNARY_CASES + CAST_CASES
