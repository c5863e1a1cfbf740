"""Exporters lower the pegasus IR to deployable code; ``glow`` writes Glow-format AOT bundles."""
