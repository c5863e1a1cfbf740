"""The TFLite importer: the flatbuffer reader, the loader (inputs, shapes, cuts, pre-quantized tables) and
per-family converters of the builtin operators."""
