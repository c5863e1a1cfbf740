"""The middle of the export pipeline: which nodes form each layer (grouping) and which code computes it (select)."""
