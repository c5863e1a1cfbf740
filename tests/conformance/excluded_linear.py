"""ONNX node cases of the linear family that pegasus does not run, each with its reason."""

EXCLUDED: dict[str, str] = {
    "test_einsum_batch_diagonal": "a diagonal (a letter repeated in one operand) is not a matrix product: Einsum "
                                  "imports matrix products, sums and transposes only, and refuses it by name",
}
