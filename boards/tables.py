"""Markdown tables of build summaries (see :mod:`boards.build` for the summary fields)."""

__all__ = ["block_table", "utilization_cell"]


def utilization_cell(utilization, kind):
    """``used/available`` for one resource kind of a summary's ``utilization``."""
    figures = utilization[kind]
    available = "?" if figures["available"] is None else figures["available"]
    return f"{figures['used']}/{available}"


def _fmax_cell(summary):
    # A block has one clock; should it have several, the slowest one bounds the block.
    if not summary["fmax_mhz"]:
        return "n/a"
    clock = min(summary["fmax_mhz"], key=summary["fmax_mhz"].get)
    return f"{summary['fmax_mhz'][clock]:.1f} ({summary['target_mhz'][clock]:.0f})"


def block_table(summaries):
    """A Markdown table with one row per block, from ``{block name: summary}``."""
    lines = [
        "| Block | Fmax MHz (target) | LUT4 | FF | EBR | DSP | Technique | Build s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, summary in summaries.items():
        utilization = summary["utilization"]
        technique = f"{summary['technique']} (harness {summary['harness_ff']} FF)"
        lines.append(" | ".join([
            f"| {name}",
            _fmax_cell(summary),
            *(utilization_cell(utilization, kind) for kind in ("LUT4", "FF", "EBR", "DSP")),
            technique,
            f"{summary['build_seconds']:.0f} |",
        ]))
    return "\n".join(lines)
