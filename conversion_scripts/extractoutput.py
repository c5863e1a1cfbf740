#!/usr/bin/env python3
"""``python extractoutput.py NAME.json`` writes ``outnamelist.txt``: which layer makes each tensor of an
imported model, and the name its dump carries (Acuity guide §3.4: the mapping between the original blob names
and the tensors of the results, to find a layer's output among ``pegasus inference``'s dumps).

One line per tensor a layer computes, graph inputs first, tab-separated: the tensor's name (as the original
framework named it), the layer, its op, shape, dtype and the dump file prefix
(``attach_<tensor>_out0_<sample>_<shape>.tensor``). Only the standard library and the .json are read.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path


def rows(model: dict) -> list[tuple[str, str, str, str, str, str]]:
    tensors = model.get("tensors", {})
    found = [(port["name"], "(input)", "Input") for port in model.get("inputs", [])]
    found += [(tensor, layer["name"], layer["op"]) for layer in model.get("layers", []) for tensor in layer["outputs"]]
    result = []
    for tensor, layer, op in found:
        info = tensors.get(tensor, {})
        shape = "x".join(str(d) for d in info.get("shape", [])) or "scalar"
        prefix = "attach_" + re.sub(r"[^A-Za-z0-9_.-]", "_", tensor) + "_out0"
        result.append((tensor, layer, op, shape, str(info.get("dtype", "?")), prefix))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write outnamelist.txt: tensor name <-> layer of NAME.json")
    parser.add_argument("model", help="the imported model's NAME.json")
    parser.add_argument("-o", "--output", default="outnamelist.txt", help="file to write (default: outnamelist.txt)")
    args = parser.parse_args(argv)
    try:
        model = json.loads(Path(args.model).read_text())
    except (OSError, ValueError) as exc:
        print(f"extractoutput.py: cannot read {args.model}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(model, dict) or "layers" not in model:
        print(f"extractoutput.py: {args.model} is not a pegasus model .json (no 'layers')", file=sys.stderr)
        return 2
    outputs = {port["name"] for port in model.get("outputs", [])}
    lines = ["# tensor\tlayer\top\tshape\tdtype\tdump prefix\t(output: a graph output)"]
    lines += ["\t".join(row) + ("\toutput" if row[0] in outputs else "") for row in rows(model)]
    target = Path(args.output)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_text("\n".join(lines) + "\n")
    os.replace(temporary, target)
    print(f"{len(lines) - 1} tensors -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
