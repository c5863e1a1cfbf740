"""Every op in the registry is complete: typed attributes with defaults, a shape rule and a float
reference kernel (later stages add their own pieces to this check). Fails naming the op.

And what each op has across the pipeline: a converter per framework, an integer rule, an emitter per target
family (``test_coverage_report``, ``-s`` prints the table); the ops that have a float emitter but no integer rule are
listed by name (``FLOAT_ONLY``)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import pegasus.importers.onnx.ops  # noqa: F401  (registers the converters)
import pegasus.quantized.lower  # noqa: F401  (registers the integer rules)
from pegasus.importers.onnx.registry import supported_op_types
from pegasus.ops.facts import op_facts, ops_with
from pegasus.ops.registry import OpDef, all_ops
from pegasus.quantized.context import registered_rules

OPS = all_ops()

# what issue 2 asks for at least (ONNX op names; each has a converter onto registry ops)
REQUIRED_ONNX_OPS = """Conv ConvTranspose Gemm MatMul Add Sub Mul Div Sum Max Min Mean Relu LeakyRelu PRelu Clip
Sigmoid HardSigmoid HardSwish Tanh Elu Selu Softplus Softsign Exp Log Sqrt Reciprocal Pow Abs Neg Floor Ceil Erf
Gelu MaxPool AveragePool GlobalAveragePool GlobalMaxPool BatchNormalization InstanceNormalization
LayerNormalization LRN Concat Split Slice Reshape Flatten Transpose Squeeze Unsqueeze Expand Tile Pad Resize
Upsample DepthToSpace SpaceToDepth Softmax LogSoftmax ReduceMean ReduceSum ReduceMax ReduceMin ReduceL2 ArgMax
Gather Cast Constant Identity Dropout Shape ConstantOfShape Range Where Equal Less Greater QuantizeLinear
DequantizeLinear LSTM GRU""".split()


def _overrides(cls: type[OpDef], method: str) -> bool:
    return getattr(cls, method) is not getattr(OpDef, method) and method in {
        name for klass in cls.__mro__ if klass is not OpDef for name in vars(klass)}


@pytest.mark.parametrize("name", list(OPS))
def test_op_entry_is_complete(name):
    cls = OPS[name]
    assert cls.name == name
    assert cls.__doc__ and cls.__doc__.strip(), f"{name}: no docstring"
    assert dataclasses.is_dataclass(cls.Attrs), f"{name}: Attrs is not a dataclass"
    assert cls.Attrs.__dataclass_params__.frozen, f"{name}: Attrs must be frozen"
    for field in dataclasses.fields(cls.Attrs):
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        assert has_default, f"{name}: attribute '{field.name}' has no default"
    for piece in ("infer", "reference"):
        assert _overrides(cls, piece), f"{name}: missing {piece}"


@pytest.mark.parametrize("onnx_op", REQUIRED_ONNX_OPS)
def test_required_onnx_op_has_converter(onnx_op):
    assert onnx_op in supported_op_types(), f"ONNX op {onnx_op} has no converter"


# ---- what each op has across the pipeline (issue 29) ------------------------------------------------------------

FRAMEWORKS = ("onnx", "tflite", "tensorflow", "keras", "pytorch", "caffe", "darknet")
#: target families of the Glow exporter -> the implementation families (kernels/strategy.py) that serve them
TARGET_FAMILIES = {"host": ("reference", "integer", "x86"), "cortex_m": ("reference", "integer", "cortex_m")}

#: ops with a float emitter but no integer rule: in a quantized model such a layer runs in float between a
#: DequantizeLinear and a QuantizeLinear (``LoweredGraph.float_layers`` says so). Giving one a rule, or adding an op
#: without one, must update this list; the integer-everywhere issue makes each of them an error.
FLOAT_ONLY = set("""And ArgMax ArgMin BitShift Cast ConstantOfShape CumSum Div Equal GRU Greater GreaterOrEqual
InstanceNormalization IsInf IsNaN LRN LSTM LayerNormalization Less LessOrEqual LogSoftmax Max Mean Min Mod Not Or
Pow RNN Range ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceProd ReduceSum ReduceSumSquare Shape Size
Where Xor""".split())


def _named_by_importer(framework: str) -> set[str]:
    """Registry ops whose name is a string in the framework's importer source: the ops its converters emit (ops
    emitted only through importers/common's shared helpers are not counted)."""
    found = set()
    for path in (Path(__file__).resolve().parents[1] / "importers" / framework).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in OPS:
                found.add(node.value)
    return found


def _implementation_families() -> dict[str, set[str]]:
    """Op -> the families of the exporter's implementations computing a layer of that op alone."""
    import pegasus.exporters.glow.kernels  # noqa: F401  (registers every implementation)
    from pegasus.exporters.glow.kernels import strategy

    families: dict[str, set[str]] = {}
    for impl in strategy.all_implementations():
        for kind in impl.kinds:
            families.setdefault(kind, set()).add(impl.family)
    return families


def _integer_ruled() -> set[str]:
    return {op for op, _rounding in registered_rules()}


def coverage() -> dict[str, dict[str, object]]:
    """Per op: the frameworks converting to it, its integer rule ("yes", "-", "n/a" for the ops the lowering emits),
    its kind (float, or integer: emitted by the lowering) and whether an implementation serves each target family."""
    named = {framework: _named_by_importer(framework) for framework in FRAMEWORKS}
    families = _implementation_families()
    ruled = _integer_ruled()
    table = {}
    for op in OPS:
        has = families.get(op, set())
        table[op] = {"frameworks": [fw for fw in FRAMEWORKS if op in named[fw]],
                     "integer_rule": "n/a" if op_facts(op).quantized_form else "yes" if op in ruled else "-",
                     "kind": "integer" if op_facts(op).quantized_form else "float",
                     **{target: bool(has & set(serving)) for target, serving in TARGET_FAMILIES.items()}}
    return table


def test_coverage_report():
    """The per-op table (run with -s to read it); every op has an emitter on every target family, and every op the
    integer lowering emits has an integer emitter."""
    table = coverage()
    header = f"{'op':22} {'frameworks':52} {'rule':5} {'kind':8} " + " ".join(f"{t:9}" for t in TARGET_FAMILIES)
    print("\n" + header)
    for op, row in table.items():
        cells = " ".join(f"{'yes' if row[t] else '-':9}" for t in TARGET_FAMILIES)
        print(f"{op:22} {','.join(row['frameworks']):52} {row['integer_rule']:5} {row['kind']:8} {cells}")
    missing = [f"{op} on {target}" for op, row in table.items() for target in TARGET_FAMILIES if not row[target]]
    assert not missing, f"no emitter: {missing}"
    assert all(table[op]["frameworks"] for op in ("Conv", "Relu", "MaxPool", "Add", "Reshape"))


def test_float_only_ops_are_the_known_ones():
    """The ops with a float emitter and no integer rule, by name (``FLOAT_ONLY``)."""
    families = _implementation_families()
    ruled = _integer_ruled()
    float_only = {op for op in OPS if op in families and not op_facts(op).quantized_form and op not in ruled}
    assert float_only == FLOAT_ONLY, (f"gained a rule (remove from FLOAT_ONLY): {sorted(FLOAT_ONLY - float_only)}; "
                                      f"float only now (add, or give it a rule): {sorted(float_only - FLOAT_ONLY)}")


def test_quantized_form_ops_need_no_rule():
    """The ops the lowering emits are not lowered again: none has a rule of its own."""
    assert not _integer_ruled() & set(ops_with("quantized_form"))
