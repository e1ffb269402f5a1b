"""Register map description: registers of 32 bits at consecutive word offsets, each made of
named fields with an access type and a reset value."""

import enum
from dataclasses import dataclass, field

__all__ = ["Access", "Field", "Register", "RegisterMap"]

WORD_BITS = 32
WORD_BYTES = WORD_BITS // 8


class Access(enum.Enum):
    RW = "rw"        # read/write by the host; the hardware sees the value
    RO = "ro"        # read-only: driven by the hardware
    PULSE = "pulse"  # write-only: a write strobes the written value for one cycle (doorbells)
    W1C = "w1c"      # sticky flags set by the hardware, cleared by writing 1


@dataclass(frozen=True)
class Field:
    name: str
    width: int
    access: Access
    doc: str
    init: int = 0

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"Field name must be an identifier, not {self.name!r}")
        if not isinstance(self.width, int) or not 1 <= self.width <= WORD_BITS:
            raise ValueError(f"Field {self.name!r}: width must be in 1..{WORD_BITS}, "
                             f"not {self.width!r}")
        if not isinstance(self.access, Access):
            raise TypeError(f"Field {self.name!r}: access must be an Access, "
                            f"not {self.access!r}")
        if not 0 <= self.init < 1 << self.width:
            raise ValueError(f"Field {self.name!r}: init {self.init!r} does not fit "
                             f"{self.width} bits")
        if self.init and self.access is not Access.RW:
            raise ValueError(f"Field {self.name!r}: only rw fields have an init value")


@dataclass(frozen=True)
class Register:
    name: str
    doc: str
    fields: tuple[Field, ...]
    offset: int = -1  # byte offset, assigned by RegisterMap

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"Register name must be an identifier, not {self.name!r}")
        if not self.fields:
            raise ValueError(f"Register {self.name!r} has no fields")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"Register {self.name!r} repeats a field name: {names}")
        if self.width > WORD_BITS:
            raise ValueError(f"Register {self.name!r}: fields take {self.width} bits, "
                             f"more than {WORD_BITS}")

    @property
    def width(self) -> int:
        return sum(f.width for f in self.fields)

    def field_offsets(self) -> dict[str, int]:
        """Bit offset of each field: fields are packed from bit 0 in declaration order."""
        offsets, bit = {}, 0
        for f in self.fields:
            offsets[f.name] = bit
            bit += f.width
        return offsets

    def pack(self, **values: int) -> int:
        offsets = self.field_offsets()
        word = 0
        for name, value in values.items():
            if name not in offsets:
                raise KeyError(f"register {self.name} has no field {name!r}; "
                               f"fields: {', '.join(offsets)}")
            width = next(f.width for f in self.fields if f.name == name)
            if not 0 <= int(value) < 1 << width:
                raise ValueError(f"{self.name}.{name} = {value!r} does not fit {width} bits")
            word |= int(value) << offsets[name]
        return word

    def unpack(self, word: int) -> dict[str, int]:
        return {f.name: (word >> off) & ((1 << f.width) - 1)
                for f, off in zip(self.fields, self.field_offsets().values(), strict=True)}


@dataclass
class RegisterMap:
    """An ordered register map; registers get consecutive word offsets from `base`."""

    name: str
    registers: list[Register] = field(default_factory=list)

    def add(self, name: str, doc: str, *fields: Field) -> Register:
        if any(r.name == name for r in self.registers):
            raise ValueError(f"Register {name!r} is already in map {self.name!r}")
        register = Register(name, doc, tuple(fields), offset=len(self.registers) * WORD_BYTES)
        self.registers.append(register)
        return register

    def __getitem__(self, name: str) -> Register:
        for register in self.registers:
            if register.name == name:
                return register
        raise KeyError(f"map {self.name!r} has no register {name!r}")

    def __iter__(self):
        return iter(self.registers)

    @property
    def size(self) -> int:
        """Bytes spanned by the map."""
        return len(self.registers) * WORD_BYTES

    @property
    def addr_width(self) -> int:
        """Address bits needed to reach every register."""
        return max(self.size - 1, 1).bit_length()
