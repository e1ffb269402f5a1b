"""Emit Verilog for one configuration of a component, with a JSON sidecar describing it.

A :class:`Design` names a component factory by import path plus its keyword parameters, so the
same description can be written to JSON, hashed into a build directory name, and re-created
inside a cocotb test (which then packs and unpacks payloads with the component's own
``data.Layout`` objects instead of hand-written bit offsets).
"""

import functools
import hashlib
import importlib
import importlib.metadata
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Const, Shape, ValueCastable
from amaranth.hdl._ir import PortDirection
from amaranth.lib import data, wiring

from .line_ram import VERILOG_SOURCE as LINE_RAM_VERILOG
from .line_ram import external_storage

__all__ = ["BUILD_ROOT", "PROJECT_ROOT", "Design", "emit", "port_table"]

#: Every generated file lives under this one ignored directory.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: Verilog every emitted design may instantiate (:mod:`sim.line_ram`); Verilator gets it first.
LIBRARY_VERILOG = LINE_RAM_VERILOG
BUILD_ROOT = Path(os.environ.get("TRAININGCXL_BUILD", PROJECT_ROOT / "build"))

SIDECAR_ENV = "TRAININGCXL_SIDECAR"


@dataclass(frozen=True)
class Design:
    """One configuration of one component: ``factory(**params)`` named ``name`` in Verilog."""

    name: str
    factory: str  # "package.module:Class"
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"Design name must be a Verilog identifier, not {self.name!r}")
        if ":" not in self.factory:
            raise ValueError(
                f"Design factory must be 'module:attribute', not {self.factory!r}"
            )
        json.dumps(self.params)  # parameters must be JSON so the sidecar can carry them

    def __hash__(self):
        return hash(self.key)

    @property
    def key(self) -> str:
        """Stable short hash of the configuration: one build directory per key."""
        blob = json.dumps([self.name, self.factory, self.params], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def elaboratable(self) -> wiring.Component:
        module, attr = self.factory.split(":")
        return getattr(importlib.import_module(module), attr)(**self.params)

    def to_json(self) -> dict:
        return {"name": self.name, "factory": self.factory, "params": self.params}

    @classmethod
    def from_json(cls, obj: dict) -> "Design":
        return cls(obj["name"], obj["factory"], dict(obj["params"]))


def _width(shape) -> int:
    if isinstance(shape, data.Layout):
        return shape.size
    return Shape.cast(shape).width


def _layout_json(shape) -> dict | None:
    if isinstance(shape, data.StructLayout | data.UnionLayout):
        return {
            "kind": "struct" if isinstance(shape, data.StructLayout) else "union",
            "size": shape.size,
            "fields": {
                name: {"offset": f.offset, "width": f.width, "layout": _layout_json(f.shape)}
                for name, f in shape
            },
        }
    if isinstance(shape, data.ArrayLayout):
        return {
            "kind": "array",
            "size": shape.size,
            "length": shape.length,
            "element": {
                "width": _width(shape.elem_shape),
                "layout": _layout_json(shape.elem_shape),
            },
        }
    return None


def _ports(component: wiring.Component):
    """(name, member, value) of every real port: ``always_ready``/``always_valid`` members are
    constants, not wires, so they do not become Verilog ports."""
    for path, member, value in component.signature.flatten(component):
        value = value.as_value() if isinstance(value, ValueCastable) else value
        if not isinstance(value, Const):
            yield "__".join(map(str, path)), member, value


def port_table(component: wiring.Component) -> list[dict]:
    """Ports in Verilog naming (path joined by ``__``), direction, width and layout."""
    return [{
        "name": name,
        "dir": "input" if member.flow == wiring.In else "output",
        "width": _width(member.shape),
        "layout": _layout_json(member.shape),
    } for name, member, _value in _ports(component)]


#: The Python trees whose code can change what a factory elaborates to.
SOURCE_TREES = ("hw", "sim", "sw_model", "tb", "boards")


@functools.cache
def source_digest() -> str:
    """Hash of every Python file a design can be built from (and the simulation models'
    Verilog), and of the Amaranth version (computed once per process: sources do not change
    under a running simulation)."""
    digest = hashlib.sha256(importlib.metadata.version("amaranth").encode())
    for tree in SOURCE_TREES:
        for path in sorted((PROJECT_ROOT / tree).rglob("*.py")):
            digest.update(str(path.relative_to(PROJECT_ROOT)).encode())
            digest.update(path.read_bytes())
    digest.update(LIBRARY_VERILOG.read_bytes())
    return digest.hexdigest()


def emit(design: Design, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write ``<name>.v`` and ``<name>.json`` into ``out_dir``; return both paths.

    Elaborating and converting a whole device takes tens of seconds, so the files are reused
    when the design and every source it could be built from are unchanged (a stamp of
    :func:`source_digest` next to them). The Verilog is written only when its text changed, so
    downstream builds keyed on file contents stay incremental.
    """
    os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")
    out_dir = Path(out_dir or BUILD_ROOT / "rtl" / design.name / design.key)
    out_dir.mkdir(parents=True, exist_ok=True)
    v_path, j_path = out_dir / f"{design.name}.v", out_dir / f"{design.name}.json"
    stamp_path = out_dir / f"{design.name}.emitted"
    stamp = hashlib.sha256(json.dumps([design.to_json(), source_digest()]).encode()).hexdigest()
    if v_path.exists() and j_path.exists() and stamp_path.exists() \
            and stamp_path.read_text() == stamp:
        return v_path, j_path
    component = design.elaboratable()
    ports = {name: (value, PortDirection.Input if member.flow == wiring.In
                    else PortDirection.Output)
             for name, member, value in _ports(component)}
    # Model memories become instances of sim/verilog/line_ram.v (no init constant to emit).
    with external_storage():
        text = verilog.convert(component, name=design.name, ports=ports, emit_src=False,
                               strip_internal_attrs=True)
    if not v_path.exists() or v_path.read_text() != text:
        v_path.write_text(text)
    sidecar = {
        "design": design.to_json(),
        "key": design.key,
        "verilog": v_path.name,
        "verilog_library": [str(LIBRARY_VERILOG.relative_to(PROJECT_ROOT))],
        "verilog_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "clock": "clk",
        "reset": {"name": "rst", "active": "high", "kind": "synchronous"},
        "ports": port_table(component),
        "properties": _public_properties(component),
    }
    j_path.write_text(json.dumps(sidecar, indent=2, sort_keys=True) + "\n")
    stamp_path.write_text(stamp)
    return v_path, j_path


def _public_properties(component) -> dict:
    """Integer/bool/str properties a component exposes (latency, depth, ...) for testbenches."""
    props = {}
    for cls in type(component).__mro__:
        for name, attr in vars(cls).items():
            if isinstance(attr, property) and not name.startswith("_") and name not in props:
                try:
                    value = getattr(component, name)
                except Exception:  # a property that needs elaboration context: not for tools
                    continue
                if isinstance(value, bool | int | str | float):
                    props[name] = value
    return props


def sidecar_from_env() -> dict:
    """Inside a cocotb test: the sidecar of the design under test."""
    path = os.environ.get(SIDECAR_ENV)
    if not path:
        raise RuntimeError(f"{SIDECAR_ENV} is not set: run this test through sim.runner")
    return json.loads(Path(path).read_text())


def design_from_env() -> Design:
    return Design.from_json(sidecar_from_env()["design"])
