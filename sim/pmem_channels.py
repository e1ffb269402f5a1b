"""One simulated memory on 1, 2 or 4 PMEM channels: what a testbench's AXI manager is connected
to when the memory stands for several memory controllers (the paper's prototype had four).

::

    axi -> PmemModel                                   (channels = 1)
    axi -> AxiArbiter -> PmemModel x channels          (channels > 1)

With several channels the device's own arbiter (``hw/mem/arbiter.py``) interleaves the lines
on address bits [7:6], and each model has the whole latency and bandwidth profile. The timing
and power-fail inputs go to every channel, the backdoor addresses system lines (line ``L`` is
line ``L >> k`` of channel ``L mod 2**k``), and the counters are summed, so a testbench sees
one memory whatever the count.
"""

from amaranth.hdl import Cat, Module, Shape, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.mem.arbiter import AxiArbiter
from hw.mem.axi import AXI4Signature
from hw.mem.interleave import channel_bits

from .pmem import PmemModel

__all__ = ["CHANNEL_SEED_STEP", "PMEM_INPUTS", "PMEM_OUTPUTS", "PmemChannels"]

#: PmemModel timing and power-fail inputs, the same on every channel.
PMEM_INPUTS = ("read_latency", "write_latency", "read_rate_num", "read_rate_den",
               "write_rate_num", "write_rate_den", "power_fail", "fail_seed", "fail_keep")
#: PmemModel outputs, under the same names (counters summed over the channels).
PMEM_OUTPUTS = ("powered_down", "backdoor_rdata", "now", "read_beats", "write_beats",
                "pending", "lost_beats", "kept_beats")
#: Channel ``c``'s torn-write seed is ``fail_seed + c * CHANNEL_SEED_STEP`` (mod 2**32), so
#: the channels draw independent verdicts from one seed.
CHANNEL_SEED_STEP = 0x9E3779B9
_SUMMED = ("read_beats", "write_beats", "pending", "lost_beats", "kept_beats")


class PmemChannels(wiring.Component):
    """``channels`` PMEM models behind one AXI port (module docstring).

    Parameters (keyword-only)
    -------------------------
    memory_lines : int
        Lines of the whole memory: a power of two, at least two per channel.
    channels : int
        1, 2 or 4. With one the model is the port (no arbiter).
    addr_width, id_width : int
        The manager's AXI address and ID widths.
    pending_beats : int
        Each model's unacknowledged-beat ring (:class:`~sim.pmem.PmemModel`).
    reorder_depth : int
        With several channels: the arbiter's reads (and writes) in flight.

    Members
    -------
    axi : ``In(AXI4Signature(addr_width, 512, id_width))``
    The :data:`PMEM_INPUTS` and :data:`PMEM_OUTPUTS` of :class:`~sim.pmem.PmemModel`, and its
    ``backdoor_addr`` (``In(range(memory_lines))``), ``backdoor_wdata`` and ``backdoor_we``.
    ``pending``, ``lost_beats`` and ``kept_beats`` are widened to hold their sums;
    ``powered_down`` is set once every channel is.
    """

    def __init__(self, *, memory_lines, channels=1, addr_width=48, id_width=8,
                 pending_beats=64, reorder_depth=64):
        k = channel_bits(channels)   # raises with the valid counts
        if (not isinstance(memory_lines, int) or isinstance(memory_lines, bool)
                or memory_lines < 2 << k or memory_lines & (memory_lines - 1)):
            raise ValueError(f"Memory lines must be a power of two, at least {2 << k} for "
                             f"{channels} channel(s), not {memory_lines!r}")
        self._channels = channels
        self._memory_lines = memory_lines
        self._arbiter = None
        if channels == 1:
            self._models = [PmemModel(depth=memory_lines, addr_width=addr_width,
                                      id_width=id_width, pending_beats=pending_beats)]
        else:
            self._arbiter = AxiArbiter(num_managers=1, channels=channels,
                                       addr_width=addr_width, id_width=id_width,
                                       reorder_depth=reorder_depth)
            self._models = [PmemModel(depth=memory_lines >> k,
                                      addr_width=self._arbiter.channel_addr_width,
                                      id_width=self._arbiter.channel_id_width,
                                      pending_beats=pending_beats)
                            for _ in range(channels)]
        shapes = self._models[0].signature.members
        members = {
            "axi": In(AXI4Signature(addr_width=addr_width, data_width=512,
                                    id_width=id_width)),
            "backdoor_addr": In(range(memory_lines)),
            "backdoor_wdata": In(512),
            "backdoor_we": In(1),
        }
        for name in PMEM_INPUTS:
            members[name] = In(shapes[name].shape)
        for name in PMEM_OUTPUTS:
            members[name] = Out(shapes[name].shape)
        if channels > 1:
            members["pending"] = Out(range(channels * pending_beats + 1))
            members["lost_beats"] = Out(Shape.cast(shapes["lost_beats"].shape).width + k)
            members["kept_beats"] = Out(Shape.cast(shapes["kept_beats"].shape).width + k)
        super().__init__(members)

    @property
    def channels(self):
        return self._channels

    @property
    def memory_lines(self):
        return self._memory_lines

    def elaborate(self, platform):
        m = Module()
        models, k = self._models, channel_bits(self._channels)
        if self._arbiter is None:
            m.submodules.memory = models[0]
            wiring.connect(m, wiring.flipped(self.axi), models[0].axi)
        else:
            m.submodules.arbiter = arbiter = self._arbiter
            wiring.connect(m, wiring.flipped(self.axi), arbiter.managers[0])
            for channel, model in enumerate(models):
                m.submodules[f"memory{channel}"] = model
                wiring.connect(m, arbiter.channels[channel], model.axi)
        for channel, model in enumerate(models):
            for name in PMEM_INPUTS:
                value = getattr(self, name)
                if name == "fail_seed":
                    value = (value + channel * CHANNEL_SEED_STEP)[:32]
                m.d.comb += getattr(model, name).eq(value)
            m.d.comb += [
                model.backdoor_addr.eq(self.backdoor_addr >> k),
                model.backdoor_wdata.eq(self.backdoor_wdata),
                model.backdoor_we.eq(self.backdoor_we
                                     & (self.backdoor_addr[:k] == channel if k else 1)),
            ]
        if k == 0:
            for name in PMEM_OUTPUTS:
                m.d.comb += getattr(self, name).eq(getattr(models[0], name))
            return m
        # backdoor_rdata is the line addressed one cycle earlier: choose with that address.
        read_channel = Signal(k)
        m.d.sync += read_channel.eq(self.backdoor_addr[:k])
        with m.Switch(read_channel):
            for channel, model in enumerate(models):
                with m.Case(channel):
                    m.d.comb += self.backdoor_rdata.eq(model.backdoor_rdata)
        m.d.comb += [
            self.now.eq(models[0].now),   # the models count the same cycles
            self.powered_down.eq(Cat(*(model.powered_down for model in models)).all()),
        ]
        for name in _SUMMED:
            m.d.comb += getattr(self, name).eq(sum(getattr(model, name) for model in models))
        return m
