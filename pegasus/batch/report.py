"""What ``pegasus batch`` prints and writes: a line per finished model, the summary table, summary.csv and
summary.json in the output folder."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from pegasus.fileio import atomic_write

COLUMNS = ("name", "framework", "status", "seconds", "scheme", "flash", "ram", "reason")


def _size(value) -> str:
    return "-" if value is None else f"{value:,}"


def line(result: dict) -> str:
    head = f"{result['status']:7} {result['name']}  ({result.get('seconds', 0):.1f} s)"
    if result["status"] == "failed":
        return f"{head}  {result['reason']}"
    return f"{head}  Flash {_size(result.get('flash'))} B, RAM {_size(result.get('ram'))} B  {result.get('scheme', '')}"


def table(results: list[dict]) -> str:
    rows = [COLUMNS] + [tuple(str(_size(r.get(c)) if c in ("flash", "ram") else r.get(c, "")) for c in COLUMNS)
                        for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    failed = sum(r["status"] == "failed" for r in results)
    text.append(f"{len(results)} models: {len(results) - failed} ok or up to date, {failed} failed")
    return "\n".join(text)


def write_summaries(results: list[dict], folder: Path) -> None:
    rows = [{c: r.get(c) for c in COLUMNS} for r in results]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(folder / "summary.csv", buffer.getvalue())
    atomic_write(folder / "summary.json", json.dumps(rows, indent=2) + "\n")
