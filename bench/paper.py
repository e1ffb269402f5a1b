"""Paper-style comparison (issue #8), measured from the RTL in Verilator on the PMEM profile.

    python -m bench paper [--presets rm1_sim rm2_sim] [--modes ...] [--batches 3]
                          [--gpu-cycles 5000] [--host-floats-per-cycle 16 [8 4 ...]]
                          [--channels 4] [--skip-lookup] [--skip-demo]
    nox -s bench                      (no arguments: this benchmark)

Cycles per batch for each training mode on RM1- and RM2-shaped presets, all on one simulated
system (:data:`tb.ckpt.designs.PAPER_SYSTEM`: the device's engines, four PMEM channels (the
paper's four memory controllers; ``--channels``) with the ``pmem`` profile each, and the host's
CXL.mem link), so every mode sees the same memory:

* ``host_gather``: the host reads every row its batch needs over CXL.mem (one 64-byte line per
  cycle per direction at most; the PMEM model's latencies and bandwidths apply), pools and
  updates on the host at ``--host-floats-per-cycle``, checkpoints by copying the touched rows
  (old values) to a log region and a flag line, persistent, before writing the rows back and a
  commit line (:mod:`bench.cocotb_paper`). Given several rates, it runs once per rate on the
  same batches: the first rate is the baseline of every ratio, and ``host_rate_sweep`` (with
  ``speedup_vs_host_rate.png``) gives each mode's speedup against each host;
* ``nmp``: near-memory lookup and update, no checkpointing;
* ``nmp_relaxed``: ``nmp`` with relaxed lookup (LOOKUP(N + 1) during the GPU's time, corrected
  by UPDATE(N)), no checkpointing: the baseline that isolates the checkpoint's own cost in the
  relaxed modes from the relaxed lookup's (which can cost more than it saves when the GPU's
  time does not cover the lookup);
* ``nmp_sync_log``: the checkpoint engine with ``CKPT_CONTROL.log_mode`` AT_UPDATE: LOOKUP
  logs nothing; UPDATE first replays the lookup's row reads into the undo log (reading the old
  values then), seals it, writes the flag and only then updates in place (no overlap with the
  GPU's time); relaxed MLP snapshots as below;
* ``nmp_log_on_lookup``: the checkpoint engine (log on lookup, batch flag, commit record) and
  relaxed MLP snapshots every K batches;
* ``nmp_log_after_lookup``: as ``nmp_log_on_lookup`` with ``log_mode`` AFTER_LOOKUP: LOOKUP runs
  unlogged and the engine replays its row reads into the undo log right after LOOKUP's status,
  while the host reads the pooled output, the GPU computes and the host writes the gradient
  (the log overlaps the GPU's time, at the cost of reading the rows twice);
* ``nmp_log_lookup_replay``: ``log_mode`` LOOKUP_THEN_REPLAY: the tap logs during LOOKUP as far
  as its buffer allows without holding LOOKUP up (the log's writes start at once), and what it
  had to drop is replayed into the log right after LOOKUP's status, overlapping the GPU;
* ``trainingcxl``: everything: relaxed MLP snapshots, relaxed lookup and log-ahead
  (``log_mode`` ON_LOOKUP): the host sends LOOKUP(N + 1) as soon as it has written batch N's
  gradient, so the lookup runs during the GPU's time and logs its own reads into batch
  N + 1's undo log; UPDATE(N) then writes batch N's rows, appends the new values of the rows
  both batches touch to that log, and corrects LOOKUP(N + 1)'s output. The first batch's
  lookup (strict: nothing is pending yet) is logged on lookup;
* ``trainingcxl_replay``: as ``trainingcxl`` with ``log_mode`` LOOKUP_THEN_REPLAY: the lookup run
  ahead is not logged, and batch N + 1's undo log is taken by a background replay after
  UPDATE(N) commits (better when the GPU's time hides that replay).

Every mode spends the same ``--gpu-cycles`` per batch between the pooled output and the
gradient (the GPU's MLP forward and backward). A batch's cycles run from the start of its
lookup (LOOKUP doorbell, or the host's first row read) to the end of its update (UPDATE status,
or the last write-back acknowledged); the host stages the batch's indices (or its row address
list) before that. MLP snapshot writes happen after the batch window and are reported apart.

Derived ratios: speedup_vs_host_gather = host_gather / mode cycles (paper: 5.2x);
ft_overhead = logging mode / nmp - 1 for each logging mode (the paper's trainingcxl / nmp;
CPR 0.53-0.68%); for the relaxed logging modes also ft_overhead_same_lookup = mode /
nmp_relaxed - 1 (the checkpoint's cost with the lookup policy held the same);
recovery_speedup = full checkpoint reload cycles (every table line read and written back
through the host link, measured) / RECOVER cycles after a power failure in an UPDATE (ECRM
10.3x). Also link bytes per batch per mode and the simulation speed, and, unless
``--skip-lookup``, the lookup bandwidth efficiency per D and read latency (``python -m bench
lookup``), and, unless ``--skip-demo``, the simulation speed of the demo configuration (a
4-batch ``python -m tb.demo`` run: the ``tiny`` device with its power failure and recovery).

Writes ``build/bench/results.json``, ``results.md`` and PNG plots.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from sim.rtl import BUILD_ROOT

__all__ = ["MODES", "RELAXED_MODES", "SIM_PRESETS", "host_rates", "main", "summarise",
           "write_report"]

MODES = ("host_gather", "nmp", "nmp_relaxed", "nmp_sync_log", "nmp_log_on_lookup",
         "nmp_log_after_lookup", "nmp_log_lookup_replay", "trainingcxl", "trainingcxl_replay")
#: The measured modes with the checkpoint engine on, and their ``CKPT_CONTROL.log_mode``.
LOGGING_MODES = {"nmp_sync_log": "AT_UPDATE", "nmp_log_on_lookup": "ON_LOOKUP",
                 "nmp_log_after_lookup": "AFTER_LOOKUP",
                 "nmp_log_lookup_replay": "LOOKUP_THEN_REPLAY",
                 "trainingcxl": "ON_LOOKUP", "trainingcxl_replay": "LOOKUP_THEN_REPLAY"}
#: The modes whose host runs relaxed lookup (``CONTROL.relaxed_lookup``): LOOKUP(N + 1) during
#: the GPU's time for batch N, corrected by UPDATE(N) (and, with the checkpoint, logged ahead
#: or replayed as the mode's ``log_mode`` says).
RELAXED_MODES = ("nmp_relaxed", "trainingcxl", "trainingcxl_replay")
MODE_DESCRIPTIONS = {
    "host_gather": "host reads rows over CXL.mem, pools/updates on the host, checkpoints by "
                   "copying touched rows before the write-back",
    "nmp": "near-memory lookup and update, no checkpointing",
    "nmp_relaxed": "near-memory, relaxed lookup (LOOKUP(N + 1) during the GPU's time, "
                   "corrected by UPDATE(N)), no checkpointing",
    "nmp_sync_log": "near-memory, undo log taken synchronously at UPDATE (old rows read "
                    "again, logged, flagged, then updated), relaxed MLP snapshots",
    "nmp_log_on_lookup": "near-memory, undo log written during the lookup, relaxed MLP "
                         "snapshots every K batches",
    "nmp_log_after_lookup": "near-memory, undo log taken by replaying the lookup's reads right "
                            "after it, overlapping the GPU's time; relaxed MLP snapshots",
    "nmp_log_lookup_replay": "near-memory, undo log taken during the lookup without holding it "
                             "up, what did not fit replayed right after it; relaxed MLP "
                             "snapshots",
    "trainingcxl": "near-memory, relaxed lookup logged ahead (its own reads, then the new "
                   "values of the rows UPDATE(N) shares with it), relaxed MLP snapshots",
    "trainingcxl_replay": "as trainingcxl, but the lookup run ahead is not logged: a background "
                          "replay takes its log after UPDATE(N); the first, strict lookup "
                          "logged as nmp_log_lookup_replay",
}

#: The rm1 and rm2 presets (the published table count, D, lookups per bag and pooling, with
#: 4,096 and 1,024 rows per table: 4 and 8 MiB of tables) with a small batch, so a run takes
#: minutes in Verilator; everything (tables, staging, the undo log's two areas, two MLP
#: snapshot slots, the full checkpoint the reload reads) fits the 32 MiB PMEM model. A batch
#: touches about 4% (rm1_sim) and 7% (rm2_sim) of the table lines, which is what makes a
#: rollback cheaper than a reload. rm2_sim also has a smaller top MLP (32, 1): the MLP runs on
#: the GPU (a fixed cycle count here), so only its snapshot size changes.
SIM_PRESETS = {
    "rm1_sim": ("rm1", {"batch_size": 4}),
    "rm2_sim": ("rm2", {"batch_size": 1, "top_mlp": [32, 1]}),
}
PAPER = {"speedup_vs_host_gather": 5.2, "ft_overhead_cpr": [0.0053, 0.0068],
         "recovery_speedup_ecrm": 10.3}


def _mean(values):
    values = list(values)
    return sum(values) / len(values) if values else None


def _steady(batches):
    """Mean total of the batches between the first and the last (None with fewer than 3).
    The first batch looks up strictly (nothing is pending yet, and with a relaxed lookup no
    earlier GPU time hides it); the last has no next lookup for its UPDATE to correct. Every
    batch of a long run but two is like the ones between."""
    return _mean(b["total"] for b in batches[1:-1]) if len(batches) >= 3 else None


def host_rates(params: dict) -> list[int]:
    """The host's pooling/update rates of a run, the baseline's first (runs before the sweep
    stored one number)."""
    rates = params["host_floats_per_cycle"]
    return [rates] if isinstance(rates, int) else list(rates)


def _host_rate_sweep(sweep: list, modes: dict) -> list:
    """Per host rate: host_gather's cycles per batch and every measured mode's speedup."""
    rows = []
    for run in sweep:
        cycles = _mean(b["total"] for b in run["batches"])
        rows.append({
            "host_floats_per_cycle": run["host_floats_per_cycle"],
            "host_gather_cycles_per_batch": cycles,
            "host_gather_steady_cycles_per_batch": _steady(run["batches"]),
            "speedup_vs_host_gather": {
                mode: cycles / modes[mode]["cycles_per_batch"] for mode in MODES
                if mode != "host_gather" and modes[mode].get("cycles_per_batch")}})
    return rows


def preset_shape(name: str) -> dict:
    from sw_model.presets import get_preset

    base, changes = SIM_PRESETS[name]
    preset = get_preset(base).replace(name=name, **{
        k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()})
    return {"base": base, "tables": preset.num_tables, "rows_per_table": list(preset.table_rows),
            "dim": preset.dim, "lookups_per_bag": preset.max_bag,
            "fixed_bag": preset.fixed_bag, "batch_size": preset.batch_size,
            "pooling": preset.pooling, "index_dist": preset.index_dist,
            "zipf_exponent": preset.zipf_exponent,
            "snapshot_interval": preset.snapshot_interval,
            "dense_features": preset.dense_features, "bottom_mlp": list(preset.bottom_mlp),
            "top_mlp": list(preset.top_mlp), "interaction": preset.interaction,
            "changed_from_base": changes}


def _pmem_traffic(run: dict, profile: dict, cycles_per_batch: float) -> dict:
    """PMEM lines per batch and the write bound: the cycles the PMEM write port needs for the
    batch's writes at the profile's write rate, and that bound over the measured cycles (how
    close the mode runs to the memory's write bandwidth)."""
    if "pmem_lines_written_per_batch" not in run:
        return {}
    written = run["pmem_lines_written_per_batch"]
    read = run["pmem_lines_read_per_batch"]
    write_bound = written / profile["write_lines_per_cycle"]
    read_bound = read / profile["read_lines_per_cycle"]
    return {"pmem_lines_read_per_batch": read, "pmem_lines_written_per_batch": written,
            "pmem_write_bound_cycles": write_bound, "pmem_read_bound_cycles": read_bound,
            "pmem_write_port_busy": write_bound / cycles_per_batch}


def summarise(raws: dict, params: dict, lookup: dict | None = None,
              demo: dict | None = None) -> dict:
    """results.json's content from the raw per-preset results of :mod:`bench.cocotb_paper`
    (``raws``: preset name -> raw), the run's parameters, ``python -m bench lookup``'s
    report and the demo's report (``build/demo/report.json``), each possibly None."""
    presets = {}
    for name, raw in raws.items():
        modes = {}
        for mode in MODES:
            run = raw["modes"].get(mode)
            if run is None:
                modes[mode] = {"status": "not run", "description": MODE_DESCRIPTIONS[mode]}
                continue
            batches = run["batches"]
            entry = {
                "status": "measured",
                "description": MODE_DESCRIPTIONS[mode],
                "batches": len(batches),
                "cycles_per_batch": _mean(b["total"] for b in batches),
                "steady_cycles_per_batch": _steady(batches),
                "link_bytes_per_batch": _mean(
                    64 * (b["link_lines_read"] + b["link_lines_written"]) for b in batches),
                "link_bytes_read_per_batch": _mean(64 * b["link_lines_read"] for b in batches),
                "link_bytes_written_per_batch": _mean(64 * b["link_lines_written"]
                                                      for b in batches),
                "per_batch": batches,
            }
            entry.update(_pmem_traffic(run, params["profile"], entry["cycles_per_batch"]))
            if mode != "host_gather":
                entry["lookup_cycles_per_batch"] = _mean(b["lookup"] for b in batches)
                entry["update_cycles_per_batch"] = _mean(b["update"] for b in batches)
                entry["counters"] = run.get("counters", {})
                k = raws[name].get("snapshot_interval") or 1
                entry["snapshot_link_bytes_per_batch_outside_window"] = (
                    64 * run.get("snapshot_lines_per_k", 0) / k)
            else:
                for key in ("gather", "host_pool", "host_update", "log_copy", "write_back",
                            "unique_rows", "occurrences"):
                    entry[f"{key}_per_batch"] = _mean(b[key] for b in batches)
            modes[mode] = entry
        ratios = {}
        hg = modes.get("host_gather", {}).get("cycles_per_batch")
        for mode in MODES:
            cycles = modes[mode].get("cycles_per_batch")
            if hg and cycles:
                modes[mode]["speedup_vs_host_gather"] = hg / cycles
        nmp = modes["nmp"].get("cycles_per_batch")
        nmp_steady = modes["nmp"].get("steady_cycles_per_batch")
        for mode in LOGGING_MODES:
            logged = modes[mode].get("cycles_per_batch")
            if nmp and logged:
                ratios[f"ft_overhead_{mode}"] = logged / nmp - 1
            logged_steady = modes[mode].get("steady_cycles_per_batch")
            if nmp_steady and logged_steady:
                ratios[f"ft_overhead_steady_{mode}"] = logged_steady / nmp_steady - 1
            if hg and logged:
                ratios[f"speedup_{mode}_vs_host_gather"] = hg / logged
            if mode in RELAXED_MODES:
                for kind, key in (("ft_overhead_same_lookup", "cycles_per_batch"),
                                  ("ft_overhead_same_lookup_steady",
                                   "steady_cycles_per_batch")):
                    base, cycles = modes["nmp_relaxed"].get(key), modes[mode].get(key)
                    if base and cycles:
                        ratios[f"{kind}_{mode}"] = cycles / base - 1
        if hg and nmp:
            ratios["speedup_nmp_vs_host_gather"] = hg / nmp
        recovery = raw.get("recovery")
        if recovery:
            recovery = {**recovery, "recovery_speedup": recovery["full_reload_cycles"]
                        / max(1, recovery["recovery_cycles"])}
            ratios["recovery_speedup"] = recovery["recovery_speedup"]
        nmp_run = raw["modes"].get("nmp")
        lookup_pmem = None
        if nmp_run:
            shape = params["presets"][name]
            useful = _mean(b.get("occurrences", 0) for b in nmp_run["batches"])
            if useful:
                lookup_pmem = useful * shape["dim"] * 4 / modes["nmp"][
                    "lookup_cycles_per_batch"] / 64
        sweep = raw.get("host_rate_sweep")
        presets[name] = {
            "shape": params["presets"][name], "modes": modes, "ratios": ratios,
            "recovery": recovery,
            "host_rate_sweep": _host_rate_sweep(sweep, modes) if sweep else None,
            "lookup_efficiency_pmem": lookup_pmem,
            "simulation": {
                "cycles": raw["simulated_cycles"], "seconds": round(raw["wall_seconds"], 1),
                "cycles_per_second": round(raw["simulated_cycles"]
                                           / max(raw["wall_seconds"], 1e-9))},
        }
    return {
        "issue": 8,
        "units": "cycles of the device clock; bytes",
        "parameters": params,
        "paper": PAPER,
        "modes": {m: MODE_DESCRIPTIONS[m] for m in MODES},
        "presets": presets,
        "lookup_efficiency": lookup,
        "sim_speed": None if demo is None else {
            "configuration": f"python -m tb.demo: preset {demo['preset']}, {demo['batches']} "
                             f"batches, seed {demo['seed']}, {demo['memory']} memory model, "
                             f"checkpointing {'on' if demo['checkpointing'] else 'off'}",
            "simulated_cycles": demo["simulated_cycles"],
            "seconds": round(demo["wall_seconds"], 1),
            "cycles_per_second": round(demo["cycles_per_second"]),
            **({"source": demo["source"]} if demo.get("source") else {})},
    }


def _fmt(value, spec=".0f"):
    return "--" if value is None else format(value, spec)


def write_markdown(results: dict) -> str:
    p = results["parameters"]
    lines = ["# TrainingCXL paper-style benchmark (from the RTL in Verilator)", "",
             f"Profile `{p['profile']['name']}` ({p['profile']['timing']}), CXL.mem link "
             f"{p['link']['lines_per_cycle_per_direction']} x 64-byte line per cycle per "
             f"direction, host pooling/update {host_rates(p)[0]} floats/cycle, "
             f"GPU MLP {p['gpu_cycles']} cycles per batch in every mode, "
             f"{p['batches']} batches per mode.", ""]
    for name, entry in results["presets"].items():
        s = entry["shape"]
        lines += [f"## {name} ({s['base']}-shaped: {s['tables']} tables x "
                  f"{s['rows_per_table'][0]} rows, D={s['dim']}, {s['lookups_per_bag']} "
                  f"lookups/bag, batch {s['batch_size']})", "",
                  "| mode | status | cycles/batch | steady cycles/batch | "
                  "speedup vs host_gather | link bytes/batch | PMEM lines read / written | "
                  "PMEM write bound | write port busy |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for mode in MODES:
            e = entry["modes"][mode]
            traffic = ("--" if "pmem_lines_read_per_batch" not in e else
                       f"{e['pmem_lines_read_per_batch']:.0f} / "
                       f"{e['pmem_lines_written_per_batch']:.0f}")
            lines.append(f"| {mode} | {e['status']} | {_fmt(e.get('cycles_per_batch'))} | "
                         f"{_fmt(e.get('steady_cycles_per_batch'))} | "
                         f"{_fmt(e.get('speedup_vs_host_gather'), '.2f')} | "
                         f"{_fmt(e.get('link_bytes_per_batch'))} | {traffic} | "
                         f"{_fmt(e.get('pmem_write_bound_cycles'))} | "
                         f"{_fmt(e.get('pmem_write_port_busy'), '.0%')} |")
        r = entry["ratios"]
        lines += ["", "- ft_overhead (mode / nmp - 1): " + _overheads(r, "ft_overhead", "; "),
                  "- steady ft_overhead (the batches between the first and the last): " +
                  _overheads(r, "ft_overhead_steady", "; "),
                  "- ft_overhead with the same lookup (relaxed mode / nmp_relaxed - 1; "
                  "steady): " + _same_lookup_overheads(r, "; ")]
        if entry.get("recovery"):
            rec = entry["recovery"]
            lines.append(f"- recovery: RECOVER {rec['recovery_cycles']} cycles "
                         f"({rec['restored_entries']} lines restored) vs full reload "
                         f"{rec['full_reload_cycles']} cycles ({rec['table_lines']} table "
                         f"lines): {rec['recovery_speedup']:.1f}x")
        if entry.get("lookup_efficiency_pmem") is not None:
            lines.append(f"- lookup efficiency on PMEM (useful row bytes / lookup cycles / "
                         f"64): {entry['lookup_efficiency_pmem']:.3f} (PMEM read rate cap "
                         f"{p['profile']['read_lines_per_cycle']:.2f})")
        sweep = entry.get("host_rate_sweep")
        if sweep:
            measured = [m for m in MODES if m in sweep[0]["speedup_vs_host_gather"]]
            lines += ["", "Speedup against a host pooling and updating at each rate (the same "
                      "batches; host_gather cycles per batch):", "",
                      "| host floats/cycle | host_gather cycles/batch | "
                      + " | ".join(measured) + " |",
                      "|---:|---:|" + "---:|" * len(measured)]
            for row in sweep:
                lines.append(f"| {row['host_floats_per_cycle']} | "
                             f"{_fmt(row['host_gather_cycles_per_batch'])} | "
                             + " | ".join(_fmt(row["speedup_vs_host_gather"][m], ".2f") + "x"
                                          for m in measured) + " |")
            lines.append("")
        sim = entry["simulation"]
        lines += [f"- simulation: {sim['cycles']} cycles in {sim['seconds']} s "
                  f"({sim['cycles_per_second']} cycles/s)", ""]
    lookup = results.get("lookup_efficiency")
    if lookup:
        lines += ["## Lookup bandwidth efficiency (python -m bench lookup, fixed-latency "
                  "memory)", "", *([f"({lookup['source']})", ""] if lookup.get("source")
                                    else []),
                  "| dim | read latency | efficiency | cycles |",
                  "|---:|---:|---:|---:|"]
        for row in lookup["results"]:
            lines.append(f"| {row['dim']} | {row['read_latency']} | "
                         f"{row['efficiency']:.3f} | {row['cycles']} |")
        lines.append("")
    speed = results.get("sim_speed")
    if speed:
        lines += ["## Simulation speed (demo configuration)", "",
                  f"{speed['cycles_per_second']} simulated cycles per second "
                  f"({speed['simulated_cycles']} cycles in {speed['seconds']} s; "
                  f"{speed['configuration']}; training, power failure, recovery and the "
                  "testbench's bit-exact checks)"
                  + (f" ({speed['source']})" if speed.get("source") else "") + ".", ""]
    channels = p["profile"].get("channels", 1)
    lines += ["PMEM write bound: the batch's PMEM writes at the memory's write rate "
              f"({p['profile']['write_lines_per_cycle']:g} lines/cycle: {channels} "
              f"channel{'s' if channels > 1 else ''} at the profile's rate), the fewest cycles any "
              "design needs for them; write port busy = bound / measured cycles. Every mode "
              "writes each updated row once; host_gather and the logging modes also write "
              "each touched row's old value once (copy or undo log), so on this profile a "
              "logging mode cannot beat host_gather by more than the other work it removes "
              "(reads over the link, host compute).", "",
              "Paper figures for comparison: 5.2x speedup vs a PMEM host baseline; CPR "
              "fault-tolerance overhead 0.53-0.68%; ECRM recovery 10.3x faster than a full "
              "reload.", ""]
    return "\n".join(lines)


def write_plots(results: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    presets = results["presets"]
    names = list(presets)
    for metric, ylabel, fname in (
            ("cycles_per_batch", "cycles per batch", "cycles_per_batch.png"),
            ("link_bytes_per_batch", "CXL.mem link bytes per batch",
             "link_bytes_per_batch.png"),
            ("speedup_vs_host_gather", "speedup vs host_gather", "speedup_vs_host_gather.png")):
        fig, ax = plt.subplots(figsize=(8, 4))
        width = 0.8 / max(1, len(names))
        for i, name in enumerate(names):
            xs, ys = [], []
            for k, mode in enumerate(MODES):
                value = presets[name]["modes"][mode].get(metric)
                if value is not None:
                    xs.append(k + i * width)
                    ys.append(value)
            ax.bar(xs, ys, width, label=name)
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(MODES))], MODES, rotation=15)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel} ({results['parameters']['profile']['name']} profile)")
        ax.legend()
        fig.tight_layout()
        path = out_dir / fname
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    fig, ax = plt.subplots(figsize=(7, 4))
    bars = [(f"ft_overhead % ({mode} / nmp - 1)",
             [100 * (presets[name]["ratios"].get(f"ft_overhead_{mode}") or 0)
              for name in names]) for mode in LOGGING_MODES]
    bars.append(("recovery speedup vs full reload (x)",
                 [presets[name]["ratios"].get("recovery_speedup") or 0 for name in names]))
    width = 0.8 / len(bars)
    for k, (label, values) in enumerate(bars):
        ax.bar([i - 0.4 + (k + 0.5) * width for i in range(len(names))], values, width,
               label=label)
    labels = names
    ax.set_xticks(range(len(names)), labels)
    ax.legend(fontsize=8)
    ax.set_title("checkpointing cost and recovery")
    fig.tight_layout()
    path = out_dir / "ft_overhead_recovery.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
    swept = {name: presets[name]["host_rate_sweep"] for name in names
             if presets[name].get("host_rate_sweep")}
    if swept:
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, sweep in swept.items():
            rows = sorted(sweep, key=lambda row: row["host_floats_per_cycle"])
            for mode in ("nmp", "trainingcxl"):
                if mode in rows[0]["speedup_vs_host_gather"]:
                    ax.plot([r["host_floats_per_cycle"] for r in rows],
                            [r["speedup_vs_host_gather"][mode] for r in rows], marker="o",
                            label=f"{name}: {mode}")
        ax.axhline(PAPER["speedup_vs_host_gather"], color="grey", linestyle="--",
                   label=f"paper: {PAPER['speedup_vs_host_gather']}x")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("host pooling/update rate (floats per device cycle)")
        ax.set_ylabel("speedup vs host_gather")
        ax.set_title("speedup against hosts of each rate")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / "speedup_vs_host_rate.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    lookup = results.get("lookup_efficiency")
    if lookup:
        fig, ax = plt.subplots(figsize=(6, 4))
        for lat in sorted({r["read_latency"] for r in lookup["results"]}):
            rows = sorted((r for r in lookup["results"] if r["read_latency"] == lat),
                          key=lambda r: r["dim"])
            ax.plot([r["dim"] for r in rows], [r["efficiency"] for r in rows], marker="o",
                    label=f"read latency {lat}")
        ax.set_xlabel("D")
        ax.set_ylabel("useful bytes / bus bytes")
        ax.set_ylim(0, 1.05)
        ax.set_title("lookup bandwidth efficiency")
        ax.legend()
        fig.tight_layout()
        path = out_dir / "lookup_efficiency.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def write_report(results: dict, out_dir: Path) -> list[Path]:
    """results.json, results.md and the plots into ``out_dir``; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "results.json", out_dir / "results.md"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(write_markdown(results))
    return [json_path, md_path, *write_plots(results, out_dir)]


def _overheads(ratios: dict, kind: str, separator: str) -> str:
    """``mode x.xx%`` for each logging mode's ``<kind>_<mode>`` ratio."""
    return separator.join(f"{mode} {_fmt(ratios.get(f'{kind}_{mode}'), '.2%')}"
                          for mode in LOGGING_MODES)


def _same_lookup_overheads(ratios: dict, separator: str) -> str:
    """``mode x.xx% (steady y.yy%)`` for each relaxed logging mode against nmp_relaxed."""
    return separator.join(
        f"{mode} {_fmt(ratios.get(f'ft_overhead_same_lookup_{mode}'), '.2%')} (steady "
        f"{_fmt(ratios.get(f'ft_overhead_same_lookup_steady_{mode}'), '.2%')})"
        for mode in RELAXED_MODES if mode in LOGGING_MODES)


def print_summary(results: dict):
    for name, entry in results["presets"].items():
        print(f"{name}:")
        for mode in MODES:
            e = entry["modes"][mode]
            if e["status"] != "measured":
                print(f"  {mode:21s} {e['status']}")
                continue
            print(f"  {mode:21s} {e['cycles_per_batch']:10.0f} cycles/batch  "
                  f"{_fmt(e.get('speedup_vs_host_gather'), '.2f')}x vs host_gather  "
                  f"{e['link_bytes_per_batch']:10.0f} link bytes/batch")
        r = entry["ratios"]
        print("  ft_overhead (mode / nmp - 1): " + _overheads(r, "ft_overhead", ", "))
        print("  steady ft_overhead (batches between the first and the last): "
              + _overheads(r, "ft_overhead_steady", ", "))
        print("  ft_overhead with the same lookup (mode / nmp_relaxed - 1): "
              + _same_lookup_overheads(r, ", "))
        if r.get("recovery_speedup") is not None:
            print(f"  recovery speedup vs full reload: {r['recovery_speedup']:.1f}x")
        print(f"  simulation: {entry['simulation']['cycles_per_second']} cycles/s")
    if results.get("sim_speed"):
        print(f"demo configuration: {results['sim_speed']['cycles_per_second']} "
              f"simulated cycles/s")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive integer, not {text!r}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench paper",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--presets", nargs="+", default=list(SIM_PRESETS),
                        choices=sorted(SIM_PRESETS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES,
                        help="the modes to measure (default: all; the others are reported as "
                             "not run)")
    parser.add_argument("--batches", type=int, default=3,
                        help="batches per mode (default 3: the steady figures need one "
                             "between the first and the last)")
    parser.add_argument("--gpu-cycles", type=int, default=5000)
    parser.add_argument("--host-floats-per-cycle", type=_positive_int, nargs="+",
                        default=[16], metavar="RATE",
                        help="host_gather's pooling/update rate in floats per cycle "
                             "(default 16); several rates run host_gather once each, the "
                             "first being the baseline of the ratios"),
    parser.add_argument("--profile", default="pmem")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--channels", type=int, choices=(1, 2, 4), default=4,
                        help="PMEM channels, each a controller with the whole profile "
                             "(default 4, as the paper's prototype; each count is its own "
                             "build)")
    parser.add_argument("--skip-lookup", action="store_true",
                        help="do not run `python -m bench lookup` (an earlier lookup.json in "
                             "the output directory is included, labelled as such)")
    parser.add_argument("--skip-demo", action="store_true",
                        help="do not run the 4-batch demo for the simulation speed (an "
                             "earlier build/demo/report.json is included, labelled as such)")
    parser.add_argument("--output-dir", default=str(BUILD_ROOT / "bench"))
    parser.add_argument("--from-raw", metavar="JSON",
                        help="write the report from a previous run's paper_raw.json")
    args = parser.parse_args(argv)
    rates = args.host_floats_per_cycle
    if len(set(rates)) != len(rates):
        parser.error(f"--host-floats-per-cycle: each rate once, not {rates}")
    if len(rates) > 1 and "host_gather" not in args.modes:
        parser.error("--host-floats-per-cycle: several rates need the host_gather mode")

    from sim.pmem import PROFILES
    from sim.runner import run
    from tb.ckpt.designs import paper_system

    profile = PROFILES[args.profile]
    out_dir = Path(args.output_dir).resolve()  # the simulator runs elsewhere
    out_dir.mkdir(parents=True, exist_ok=True)
    system = paper_system(args.channels)
    channels = args.channels
    params = {
        # Each channel is one PMEM controller with the whole profile; the rates are the
        # memory's, all channels together.
        "profile": {"name": profile.name, "timing": profile.inputs(), "channels": channels,
                    "read_lines_per_cycle":
                        channels * profile.read_rate[0] / profile.read_rate[1],
                    "write_lines_per_cycle":
                        channels * profile.write_rate[0] / profile.write_rate[1]},
        "link": {"lines_per_cycle_per_direction": 1, "line_bytes": 64,
                 "model": "sim.host_link.HostLink: AXI4 manager on the same PMEM channels "
                          "(through the device's arbiter), one request per line, reads in "
                          "flight up to the arbiter's reorder depth"},
        "host_floats_per_cycle": args.host_floats_per_cycle,
        "host_work": "pool: occurrences x D floats; update: (occurrences + 2 x unique rows) "
                     "x D floats; not overlapped with the link",
        "gpu_cycles": args.gpu_cycles,
        "batches": args.batches,
        "seed": args.seed,
        "design": system.to_json(),
        "presets": {name: preset_shape(name) for name in args.presets},
        "batch_window": "first lookup read (LOOKUP doorbell / host's first row read) to the "
                        "update's completion (UPDATE status / last write-back acknowledged); "
                        "index staging before, MLP snapshot writes after",
        "nmp_host_transfers": "indices, offsets in; pooled output out; gradient in: counted "
                              "as link bytes; the testbench moves them one line per cycle",
        "full_reload": "every table line read from a checkpoint region and written in place "
                       "through the host link, in host-buffer chunks",
    }
    raw_path = out_dir / "paper_raw.json"
    if args.from_raw:
        raws = json.loads(Path(args.from_raw).read_text())["presets"]
    else:
        spec = {"presets": [{"preset": name, "base": SIM_PRESETS[name][0],
                             "changes": SIM_PRESETS[name][1]} for name in args.presets],
                "batches": args.batches, "profile": args.profile, "seed": args.seed,
                "gpu_cycles": args.gpu_cycles,
                "host_floats_per_cycle": args.host_floats_per_cycle,
                "modes": [mode for mode in MODES if mode in args.modes], "recovery": True}
        spec_path = out_dir / "paper_spec.json"
        spec_path.write_text(json.dumps(spec))
        # One simulation for every preset (one build check, one simulator start).
        # A run directory per output directory, so two runs can share the built model.
        run_name = "paper" if out_dir == (BUILD_ROOT / "bench").resolve() else (
            "paper_" + hashlib.sha1(str(out_dir).encode()).hexdigest()[:8])
        run(system, "bench.cocotb_paper", seed=args.seed, run_name=run_name,
            extra_env={"BENCH_SPEC": str(spec_path), "BENCH_RESULT": str(raw_path)})
        raws = json.loads(raw_path.read_text())["presets"]
    params["presets"] = {name: preset_shape(name) for name in raws}
    for name, raw in raws.items():
        raw["snapshot_interval"] = params["presets"][name]["snapshot_interval"]
    lookup_report = None
    lookup_path = out_dir / "lookup.json"
    if not args.skip_lookup:
        from bench import lookup

        lookup.main(["--output", str(lookup_path)])
        lookup_report = json.loads(lookup_path.read_text())
    elif lookup_path.exists():
        # Reported as what it is: an earlier run of `python -m bench lookup`.
        lookup_report = json.loads(lookup_path.read_text())
        lookup_report["source"] = (f"earlier run of python -m bench lookup ({lookup_path}, "
                                   f"written {time.ctime(lookup_path.stat().st_mtime)})")
    from tb import demo

    demo_report = None
    if not args.skip_demo:
        if demo.main(["--batches", "4", "--seed", str(args.seed)]) != 0:
            print("the demo run failed: see its output above", file=sys.stderr)
            return 1
        demo_report = json.loads(demo.REPORT_PATH.read_text())
    elif demo.REPORT_PATH.exists():
        demo_report = json.loads(demo.REPORT_PATH.read_text())
        demo_report["source"] = (f"earlier demo run, {demo.REPORT_PATH}, written "
                                 f"{time.ctime(demo.REPORT_PATH.stat().st_mtime)}")
    if demo_report is not None and "cycles_per_second" not in demo_report:
        demo_report = None  # written before the demo measured its speed
    results = summarise(raws, params, lookup=lookup_report, demo=demo_report)
    for path in write_report(results, out_dir):
        print(f"written {path}")
    print_summary(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
