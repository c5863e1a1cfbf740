"""The Caffe importer: Caffe's messages declared in Python (proto.py), the prototxt/caffemodel reader, the
loader (inputs, post-processing cut, weights) and per-family layer converters."""
