"""docs/benchmarks.md: the machine, the versions, one table per workload.

Every figure is the median over the repeats, followed by its ratio to
anchorage's figure for the same workload (peer / anchorage: above 1 means
more tokens per second, or a longer latency, than anchorage). A peer that
could not run is listed with its reason instead of silently missing.

Not for: measuring anything.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from bench.loadgen import LoadSummary

ANCHORAGE = "anchorage"


def machine() -> list[str]:
    model = "unknown CPU"
    flags = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and model == "unknown CPU":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            have = set(line.split(":", 1)[1].split())
            flags = " ".join(f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16") if f in have)
    mem = next((ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")), "0")
    return [
        f"- CPU: {model}; {len(os.sched_getaffinity(0))} cores usable ({os.cpu_count()} online); SIMD: {flags}",
        f"- memory: {int(mem) / 2**20:.1f} GiB; no GPU",
        f"- OS: {platform.platform()}; Python {sys.version.split()[0]}",
    ]


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def _median(values) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan


def _cell(value: float, base: float | None, fmt: str) -> str:
    if math.isnan(value):
        return "n/a"
    text = format(value, fmt)
    if base is None or math.isnan(base) or base == 0:
        return text
    return f"{text} ({value / base:.2f}x)"


COLUMNS = [
    ("tok_per_s", "tokens/s", ".2f"),
    ("ttft_p50", "TTFT p50 (s)", ".2f"),
    ("ttft_p95", "TTFT p95 (s)", ".2f"),
    ("itl_p50", "ITL p50 (ms)", ".0f"),
    ("itl_p95", "ITL p95 (ms)", ".0f"),
]


def load_table(runs: dict[str, list[LoadSummary]], notes: dict[str, str]) -> list[str]:
    """One row per peer: median of each figure over its repeats, ratio to anchorage."""
    med: dict[str, dict[str, float]] = {}
    for peer, summaries in runs.items():
        med[peer] = {k: _median(getattr(s, k) for s in summaries) for k, _, _ in COLUMNS}
        med[peer]["itl_p50"] *= 1000.0
        med[peer]["itl_p95"] *= 1000.0
    base = med.get(ANCHORAGE)
    head = "| peer | " + " | ".join(title for _, title, _ in COLUMNS) + " | repeats | notes |"
    lines = [head, "|---" * (len(COLUMNS) + 3) + "|"]
    for peer, m in med.items():
        cells = [_cell(m[k], None if base is None or peer == ANCHORAGE else base[k], fmt) for k, _, fmt in COLUMNS]
        lines.append(f"| {peer} | " + " | ".join(cells) + f" | {len(runs[peer])} | {notes.get(peer, '')} |")
    return lines


def slot_table(rows: dict[str, list[dict]]) -> list[str]:
    keys = [("prefill_s", "prefill (s)"), ("save_s", "save (s)"), ("restore_s", "restore (s)"),
            ("ttft_after_restore_s", "TTFT after restore (s)"), ("speedup", "prefill / restore")]
    lines = ["| peer | " + " | ".join(t for _, t in keys) + " | cached after restore | file MiB | repeats |",
             "|---" * (len(keys) + 4) + "|"]
    meds = {peer: {k: _median(r.get(k) for r in runs) for k, _ in keys} for peer, runs in rows.items()}
    base = meds.get(ANCHORAGE)
    for peer, runs in rows.items():
        med = meds[peer]
        cached = _median(r.get("cached_after") for r in runs)
        mib = _median(r.get("file_bytes", math.nan) / 2**20 for r in runs)
        cells = [_cell(med[k], None if base is None or peer == ANCHORAGE else base[k], ".2f") for k, _ in keys]
        lines.append(f"| {peer} | " + " | ".join(cells) + f" | {cached:.0f} | {mib:.0f} | {len(runs)} |")
    return lines


def write(path: Path, *, command: str, started: float, load_start: str, versions: dict[str, str], checkpoint: str,
          unavailable: dict[str, str], sections: list[tuple[str, str, list[str]]], peers_text: list[str],
          closing: list[str]) -> None:
    out = ["# Benchmarks", "",
           f"Written by `{command}` on "
           f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}, in {(time.time() - started) / 60:.0f} min. "
           "Every peer ran here, in this one run, on the same checkpoint and the same requests. "
           "Figures are medians over the repeats; `(r x)` is the ratio peer / anchorage.", "",
           "## Machine", "", *machine(),
           f"- load average (1/5/15 min) at start: {load_start}; at end: {load_average()}. The machine is shared "
           "with other jobs, so timings are noisy: read ratios, and small differences, with care.", "",
           "## Versions", "", *[f"- {k}: {v}" for k, v in versions.items()], "",
           "## Checkpoint", "", checkpoint, "",
           "## Peers", "", "Each serves on 127.0.0.1 and is sent streamed `/v1/completions` requests with text "
           "prompts, greedy, a fixed number of new tokens, EOS ignored (each in its own spelling).", "", *peers_text, ""]
    if unavailable:
        out += ["## Peers that could not run", ""]
        out += [f"- **{peer}**: {why.strip().splitlines()[0] if why.strip() else 'unknown'}" for peer, why in unavailable.items()]
        out += [""]
    for title, intro, table in sections:
        out += [f"## {title}", "", intro, "", *table, ""]
    out += closing
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out).rstrip() + "\n")
