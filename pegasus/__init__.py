"""pegasus: take a trained neural network from any framework and turn it into microcontroller code.

The package holds the core every other part stands on: the intermediate representation (``ir``), the
one operator registry (``ops``), the graph passes (``passes``), the NumPy reference interpreter
(``runtime``) and the command line (``cli``). Importers, quantizers and exporters install under this
namespace as ``pegasus.importers``, ``pegasus.quantizers`` and ``pegasus.exporters``.
"""

__version__ = "0.1.0"
