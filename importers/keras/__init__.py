"""Keras importer: .h5/.hdf5 (Keras 2 and 3) and .keras files read as data, converted onto registry ops."""
