"""Batch conversion (``pegasus batch``): a YAML manifest of models, each taken through import → (inputmeta →)
quantize → export by running the ``pegasus`` sub-commands as separate processes, locally or on a Dask cluster.

``manifest`` reads and checks the manifest into jobs before anything runs; ``jobs`` runs one job (in its own
processes, so a crash or a timeout stays that model's) and knows when its outputs are up to date; ``report``
prints and writes the summary."""
