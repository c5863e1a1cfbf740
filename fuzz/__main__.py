"""``python -m fuzz``: run fuzz targets (``make fuzz`` runs each for a set time; the tests run a short seeded
slice of each and replay the regressions).

    python -m fuzz --target onnx --runs 10000 --seed 1      # seeded mutation, reproducible
    python -m fuzz --target all --seconds 300               # each target for 5 minutes
    python -m fuzz --target onnx --atheris --seconds 600    # coverage-guided (pip install atheris)
    python -m fuzz --target all --replay                    # the saved regressions only

Runs under an address-space limit (``--memory``, default 8 GiB: the frameworks reserve a few GB when imported).
Exit 1 if any input broke a target."""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

from fuzz.targets import load_all


def _atheris(target, seconds: float | None, runs: int) -> int:
    import atheris

    from fuzz.runner import check_one

    scratch = Path(tempfile.mkdtemp(prefix="pegasus-fuzz-"))
    item = target.items()[0]
    suffix = "".join(item.suffixes)

    def one_input(data: bytes) -> None:
        path = scratch / f"input{suffix}"
        path.write_bytes(data)
        try:
            problem = check_one(target, path, scratch)
        except Exception:  # a PegasusError: refused cleanly
            return
        if problem:
            raise RuntimeError(problem)

    args = [sys.argv[0], str(target.corpus), "-timeout=30", "-rss_limit_mb=8192", f"-runs={runs}"]
    if seconds:
        args.append(f"-max_total_time={int(seconds)}")
    atheris.Setup(args, one_input)
    atheris.Fuzz()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="all", help="a target name, or 'all'")
    parser.add_argument("--runs", type=int, default=10**9, help="mutants per target")
    parser.add_argument("--seconds", type=float, help="time per target")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replay", action="store_true", help="only replay fuzz/regressions/")
    parser.add_argument("--atheris", action="store_true", help="coverage-guided, with atheris (one target)")
    parser.add_argument("--no-keep", action="store_true", help="do not save broken inputs as regressions")
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON")
    parser.add_argument("--memory", type=int, default=8 * 2**30, help="address-space limit in bytes")
    parser.add_argument("--list", action="store_true", help="list the targets")
    args = parser.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (args.memory, args.memory))
    targets = load_all()
    if args.list:
        print("\n".join(sorted(targets)))
        return 0
    chosen = sorted(targets) if args.target == "all" else [args.target]
    unknown = [name for name in chosen if name not in targets]
    if unknown:
        parser.error(f"unknown target {unknown[0]}; targets: {' '.join(sorted(targets))}")
    if args.atheris:
        return _atheris(targets[chosen[0]], args.seconds, args.runs if args.runs < 10**9 else -1)
    from fuzz.runner import fuzz, replay

    summaries = []
    for name in chosen:
        summary = replay(targets[name]) if args.replay else fuzz(targets[name], args.runs, args.seed, args.seconds,
                                                                  keep=not args.no_keep)
        summaries.append(summary)
        if not args.json:
            print(f"{name}: {summary.executions} inputs in {summary.seconds:.0f} s: {summary.read} read, "
                  f"{summary.refused} refused, {len(summary.broken)} broke it", flush=True)
            for line in summary.broken:
                print(f"  {line}", flush=True)
    if args.json:
        print(json.dumps([s.as_dict() for s in summaries]))
    return 1 if any(s.broken for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
