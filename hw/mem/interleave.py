"""How device physical addresses spread over the memory channels: 64-byte lines interleaved on
address bits [7:6], in Python (testbenches, backdoors) and in Amaranth (the arbiter).

With ``channels`` = 2**k channels, line ``L`` of the device's address space lives in channel
``L mod 2**k`` at line ``L >> k`` of that channel; bits [5:0] (the byte in the line) stay as
they are. So consecutive lines go to consecutive channels and each channel sees a compact
address space of its own (``addr_width - k`` bits), as each controller of a real multi-channel
memory system does.

The granule is one line, so a burst of more than one 512-bit beat would cross channels: every
request that goes through the interleave must be a single beat (``hw/mem/arbiter.py``).
"""

from amaranth.hdl import Cat, Value

__all__ = ["CHANNEL_SHIFT", "VALID_CHANNELS", "channel_bits", "channel_of", "join_address",
           "local_address", "split_address"]

#: Interleave granule: one 64-byte line, so the channel is taken from bits [7:6] (4 channels).
CHANNEL_SHIFT = 6
VALID_CHANNELS = (1, 2, 4)


def channel_bits(channels: int) -> int:
    """log2 of the channel count (0, 1 or 2)."""
    if channels not in VALID_CHANNELS:
        raise ValueError(f"Channel count must be one of 1, 2, 4, not {channels!r}")
    return channels.bit_length() - 1


def split_address(address: int, channels: int) -> tuple[int, int]:
    """(channel, address inside that channel) of a device physical address."""
    k = channel_bits(channels)
    line, byte = divmod(address, 1 << CHANNEL_SHIFT)
    return line % channels, ((line >> k) << CHANNEL_SHIFT) | byte


def join_address(channel: int, local: int, channels: int) -> int:
    """The device physical address of byte ``local`` of channel ``channel``."""
    k = channel_bits(channels)
    if not 0 <= channel < channels:
        raise ValueError(f"Channel must be in 0..{channels - 1}, not {channel!r}")
    line, byte = divmod(local, 1 << CHANNEL_SHIFT)
    return (((line << k) | channel) << CHANNEL_SHIFT) | byte


def channel_of(address: Value, channels: int) -> Value:
    """The channel bits of an address signal (a 0-bit value for one channel)."""
    k = channel_bits(channels)
    return address[CHANNEL_SHIFT:CHANNEL_SHIFT + k]


def local_address(address: Value, channels: int) -> Value:
    """The address inside its channel: ``address`` without the channel bits."""
    k = channel_bits(channels)
    return Cat(address[:CHANNEL_SHIFT], address[CHANNEL_SHIFT + k:])
