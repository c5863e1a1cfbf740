"""Dropout cases we do not run: training mode draws random masks, which inference code never does."""

_TRAINING = "training-mode Dropout is random; pegasus imports inference graphs and refuses it with a clear error"
EXCLUDED = {
    name: _TRAINING
    for name in ("test_training_dropout", "test_training_dropout_default", "test_training_dropout_default_mask",
                 "test_training_dropout_mask", "test_training_dropout_zero_ratio",
                 "test_training_dropout_zero_ratio_mask")
}
