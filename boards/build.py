"""Runs one open-toolchain ECP5 build and writes its ``summary.json``.

The nextpnr options are passed through Amaranth's override mechanism (``nextpnr_opts``), so the
build script Amaranth generates stays the one users know: Yosys ``synth_ecp5``, then
``nextpnr-ecp5 --report report.json``, then ``ecppack``. Timing is allowed to fail in nextpnr
so a block that misses the target still yields its achieved Fmax; the summary records whether
the target was met, and callers decide whether that is an error.
"""

import json
import subprocess
import time
from pathlib import Path

from .nextpnr_report import load_report, summarise_report
from .toolchain import open_toolchain_env, using_open_toolchain

__all__ = ["REPORT_FILE", "SUMMARY_FILE", "prepare_plan", "run_ecp5_build", "source_revision",
           "write_summary"]


REPORT_FILE = "report.json"
SUMMARY_FILE = "summary.json"

_NEXTPNR_OPTS = f"--report {REPORT_FILE} --timing-allow-fail"


def prepare_plan(platform, top, *, name="top", **overrides):
    """``platform.build(top, do_build=False)`` with the open toolchain selected.

    For ECP5 platforms the nextpnr report options are added; ``overrides`` are passed on to
    Amaranth's template overrides.
    """
    if getattr(platform, "family", None) == "ecp5":
        overrides.setdefault("nextpnr_opts", _NEXTPNR_OPTS)
    with using_open_toolchain():
        return platform.build(top, name=name, do_build=False, **overrides)


def source_revision():
    """``git describe --always --dirty`` of the working tree, so figures tracked over time say
    which sources they measured; ``None`` outside a git checkout."""
    try:
        result = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                                text=True, check=True, cwd=Path(__file__).parent)
    except (OSError, subprocess.CalledProcessError):
        return None
    return result.stdout.strip()


def write_summary(path, summary):
    """Write ``summary`` as indented JSON, creating the parent directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def run_ecp5_build(platform, top, *, build_dir, name="top", extra_summary=None):
    """Build ``top`` for ``platform`` in ``build_dir`` and summarise nextpnr's report.

    Returns the summary (also written to ``build_dir/summary.json``): the fields of
    :func:`boards.nextpnr_report.summarise_report`, the device, the build's wall-clock
    seconds, the paths of the report and the bitstream, and ``extra_summary``.
    """
    if getattr(platform, "family", None) != "ecp5":
        raise ValueError(f"The open-toolchain build is for ECP5 platforms, not {platform!r}")
    build_dir = Path(build_dir)
    plan = prepare_plan(platform, top, name=name)
    started = time.monotonic()
    plan.execute_local(str(build_dir), env=open_toolchain_env())
    seconds = time.monotonic() - started

    summary = summarise_report(load_report(build_dir / REPORT_FILE))
    summary.update({
        "device": f"{platform.device}-{platform.speed}{platform.package}",
        "source_revision": source_revision(),
        "build_seconds": round(seconds, 1),
        "report": str(build_dir / REPORT_FILE),
        "bitstream": str(build_dir / f"{name}.bit"),
    })
    summary.update(extra_summary or {})
    write_summary(build_dir / SUMMARY_FILE, summary)
    return summary
