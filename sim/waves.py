"""GTKWave save files that group the design's ports, so a wave file opens ready to read."""

import json
from pathlib import Path

__all__ = ["write_gtkw"]


def _group_of(port_name: str) -> str:
    # Amaranth flattens interface paths with "__": group "i__payload" and "i__valid" under "i".
    return port_name.split("__", 1)[0] if "__" in port_name else "(scalar ports)"


def write_gtkw(built, wave_file: Path) -> Path:
    """Write ``<name>.gtkw`` beside ``wave_file``: clock and reset first, then one group per
    interface of the top-level signature (from the JSON sidecar)."""
    sidecar = json.loads(Path(built.sidecar).read_text())
    top = sidecar["design"]["name"]
    groups: dict[str, list[dict]] = {}
    for port in sidecar["ports"]:
        groups.setdefault(_group_of(port["name"]), []).append(port)

    def trace(name: str, width: int) -> list[str]:
        # 28 = binary for 1-bit signals, 22 = hexadecimal for vectors.
        if width == 1:
            return ["@28", f"TOP.{top}.{name}"]
        return ["@22", f"TOP.{top}.{name}[{width - 1}:0]"]

    gtkw = wave_file.with_name(f"{top}.gtkw")
    lines = [f'[dumpfile] "{wave_file.resolve()}"', f'[savefile] "{gtkw.resolve()}"',
             "[timestart] 0", "@200", "-clock and reset"]
    lines += trace(sidecar["clock"], 1) + trace(sidecar["reset"]["name"], 1)
    for group, ports in groups.items():
        lines += ["@800200", f"-{group}"]
        for port in ports:
            lines += trace(port["name"], port["width"])
        lines += ["@1000200", f"-{group}"]
    gtkw.write_text("\n".join(lines) + "\n")
    return gtkw
