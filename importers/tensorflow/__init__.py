"""TensorFlow importer: frozen GraphDefs, SavedModels and TF1 MetaGraphs with checkpoints, read as data."""
