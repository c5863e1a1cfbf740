"""Importers translate each framework's graph onto pegasus registry ops (installed as pegasus.importers)."""
