"""The intermediate representation: dtypes, tensor types, graph, builder, verifier, model files."""
