"""The Markdown register reference, generated from a `RegisterMap`."""

from .map import RegisterMap

__all__ = ["registers_markdown"]


def registers_markdown(regmap: RegisterMap, *, title: str | None = None) -> str:
    lines = [f"# {title or regmap.name} registers", "",
             "Generated from the register map in the code; do not edit by hand.", "",
             "| Offset | Register | Bits | Field | Access | Reset | Description |",
             "|---:|---|---|---|---|---:|---|"]
    for register in regmap:
        first = True
        for f, offset in zip(register.fields, register.field_offsets().values(), strict=True):
            bits = f"[{offset + f.width - 1}:{offset}]" if f.width > 1 else f"[{offset}]"
            name = f"**{register.name}**" if first else ""
            where = f"0x{register.offset:03x}" if first else ""
            doc = f.doc if not first else f"{register.doc} {f.doc}".strip()
            lines.append(f"| {where} | {name} | {bits} | {f.name} | {f.access.value} | "
                         f"{f.init:#x} | {doc} |")
            first = False
    return "\n".join(lines) + "\n"
