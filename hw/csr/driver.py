"""Host-side register access by name, over any 32-bit read/write pair of coroutines
(cocotbext-axi's AxiLiteMaster in the testbenches, a PCIe BAR mapping on a real host)."""

from collections.abc import Awaitable, Callable

from .map import RegisterMap

__all__ = ["RegisterDriver"]


class RegisterDriver:
    """``await drv.write("LR", value=bits)``; ``await drv.read("STATUS") -> {field: value}``.

    ``read32(byte_offset) -> int`` and ``write32(byte_offset, word)`` are coroutines.
    Writing names only some fields of a register that also has rw fields would clear the
    others, so `write` requires every rw field unless ``merge=True`` (read-modify-write).
    """

    def __init__(self, regmap: RegisterMap, read32: Callable[[int], Awaitable[int]],
                 write32: Callable[[int, int], Awaitable[None]], *, base: int = 0):
        self.regmap = regmap
        self._read32, self._write32, self._base = read32, write32, base

    async def read(self, name: str) -> dict[str, int]:
        register = self.regmap[name]
        return register.unpack(await self._read32(self._base + register.offset))

    async def write(self, name: str, *, merge: bool = False, **values: int) -> None:
        register = self.regmap[name]
        if merge:
            values = {**(await self.read(name)), **values}
        await self._write32(self._base + register.offset, register.pack(**values))

    async def read_wide(self, prefix: str, count: int) -> int:
        """A value split over ``<prefix>_0 .. <prefix>_<count-1>`` (32 bits each, low first)."""
        value = 0
        for i in range(count):
            word = await self._read32(self._base + self.regmap[f"{prefix}_{i}"].offset)
            value |= word << (32 * i)
        return value

    async def write_wide(self, prefix: str, count: int, value: int) -> None:
        if not 0 <= value < 1 << (32 * count):
            raise ValueError(f"{prefix}: {value!r} does not fit {32 * count} bits")
        for i in range(count):
            await self._write32(self._base + self.regmap[f"{prefix}_{i}"].offset,
                                (value >> (32 * i)) & 0xFFFF_FFFF)
