"""The Darknet importer: the cfg parser (line numbers kept for errors), the weights reader (old and new
headers), the loader (inputs, routes, heads as outputs) and the layer converters."""
