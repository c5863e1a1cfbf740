"""``pegasus batch manifest.yaml``: convert many models in one go (issue 15), on local worker processes or on
an existing Dask cluster; one model's failure, crash or timeout never stops the others."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed

from pegasus.errors import PegasusError
from pegasus.fileio import check_folder

DASK_HINT = "--dask-scheduler needs dask.distributed: pip install 'pegasus-nn[dask]'"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "batch", help="convert every model of a YAML manifest (import, quantize, export)",
        description="Take each model of the manifest through import -> (generate inputmeta ->) quantize -> export "
                    "glow into OUTPUT_DIR/NAME/, each step a separate pegasus process; print a line per model "
                    "and a summary (also summary.csv, summary.json). Exit 1 if a model failed, 2 for a bad "
                    "manifest.")
    parser.add_argument("manifest", help="the YAML manifest: optional 'defaults:' and a 'models:' list")
    parser.add_argument("--jobs", type=int, default=1, help="models converted at once (default 1)")
    parser.add_argument("--output-dir", help="where each model's folder goes (default: batch_output next to the "
                                             "manifest)")
    parser.add_argument("--dask-scheduler", metavar="ADDRESS",
                        help="run the jobs on an existing Dask cluster (tcp://host:port); every worker must see "
                             "the manifest's files and the output folder at the same paths (a shared filesystem)")
    parser.add_argument("--force", action="store_true", help="convert again models whose outputs are up to date")
    parser.set_defaults(run=run)


def _local(jobs, force: bool, workers: int) -> Iterable[dict]:
    from pegasus.batch.jobs import run_job

    # threads only wait: every step of a job is its own `python -m pegasus` process
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_job, job, force) for job in jobs]
        for future in as_completed(futures):
            yield future.result()


def _dask(jobs, force: bool, address: str) -> Iterable[dict]:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise PegasusError(DASK_HINT) from None
    from pegasus.batch.jobs import run_job

    try:
        client = Client(address, timeout="10s")
    except OSError as exc:
        raise PegasusError(f"--dask-scheduler {address}: cannot connect ({exc})") from None
    with client:
        futures = [client.submit(run_job, job, force, key=f"pegasus-batch-{job.name}-{job.digest()[:8]}",
                                 pure=False) for job in jobs]
        for future in dask_completed(futures):
            yield future.result()


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from pegasus.batch.manifest import load_manifest
    from pegasus.batch.report import line, table, write_summaries

    if args.jobs < 1:
        raise PegasusError(f"--jobs must be at least 1, got {args.jobs}")
    jobs = load_manifest(args.manifest, args.output_dir)
    output_dir = check_folder(jobs[0].output_dir, "--output-dir")
    if args.dask_scheduler:
        results_iter = _dask(jobs, args.force, args.dask_scheduler)
    else:
        results_iter = _local(jobs, args.force, args.jobs)
    order = {job.name: index for index, job in enumerate(jobs)}
    results = []
    with tqdm(total=len(jobs), unit="model", file=sys.stderr, disable=not sys.stderr.isatty()) as bar:
        for result in results_iter:
            results.append(result)
            tqdm.write(line(result), file=sys.stdout)
            bar.update()
    results.sort(key=lambda r: order[r["name"]])
    print()
    print(table(results))
    write_summaries(results, output_dir)
    print(f"wrote {output_dir / 'summary.csv'} and summary.json")
    return 1 if any(r["status"] == "failed" for r in results) else 0
