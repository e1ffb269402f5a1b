"""The embedding engine as a self-test device: engine + block-RAM memory + a step sequencer.

:class:`EngineUnderTest` has the stream ports a :class:`~boards.bist.check.Check` needs. Each
stimulus word is a *step*:

- ``CONFIG``: load the table descriptors, the regions and the learning rate (held in
  registers, so the engine sees them as a device would, not as constants);
- ``COMMAND``: hand one command to the engine; its completion status comes out as one result
  word (the ``status_layout`` bits, zero-extended to 512);
- ``READ``: read ``length + 1`` lines from memory in one INCR burst (it must not cross a 4 KiB
  boundary); every line comes out as one result word.

The sequencer owns the memory port between commands (for READ) and the engine owns it while a
command runs; the engine ends a command only when all its reads and writes are answered, so
the port changes hands on a quiet bus.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.emb.engine import EmbeddingEngine
from hw.emb.layouts import command_layout, region_layout, table_layout
from hw.fanout import replicated_register
from hw.skid import SkidBuffer

from .axi_bram import LINE_BITS, AxiBram

__all__ = ["ENGINES", "ENGINE_DEFAULTS", "TWO_STAGE_ENGINE_PARAMS", "EngineUnderTest", "Step",
           "check_engine", "step_layout"]


class Step(enum.Enum, shape=2):
    CONFIG = 0
    COMMAND = 1
    READ = 2


# The smallest configuration that still exercises everything: two tables of up to 32 floats
# a row (rows of two lines), one region, an 8 KiB address space, few reads in flight, the
# smallest buffers. The 64 FP32 lanes take most of an ECP5-85F whatever these are. Four
# register stages each, and the lookup's FPGA registers (``fpga_pipelining``), took the
# whole design from 26.5 to 32.1 MHz on the ULX3S: with two stages the FP units' first
# stages held the pooler's accumulator read and the multipliers' DSP inputs behind 512-bit
# multiplexers. They cost some 5,000 flip-flops (seven stages would cost 15,000 more). A
# fifth multiplier stage (``classify`` apart from ``prenormalize``: the operands, chosen
# across the die, reach a lane's unpacking in a cycle of their own) then took it from 33.2
# to 36.1 MHz for 1,661 flip-flops, and the lookup alone from 29.8 to 35.6 MHz. With the
# lanes folded by 2 there is room for the full seven multiplier stages (``product`` apart
# from ``normalize``: a multiplier lane's carry chain and normalization were the folded
# design's longest path, 52.8 MHz) and five adder stages (``compare`` apart from ``swap``);
# with them and the registers of ``516d4ac``..``bc01e22`` the folded design routed at
# 56.7 MHz (seed 2). The self-test runs strict lookups, so the relaxed lookup's correction
# is left out. MEAN factors come from the sequential divider (569 LUT4 and 178 FF; the
# pipelined one is 2,927 and 2,683).
ENGINE_DEFAULTS = dict(max_tables=2, max_dim=32, num_regions=1, addr_width=13, id_width=3,
                       outstanding_reads=4, index_buffer_depth=32, offset_buffer_depth=32,
                       output_buffer_depth=2, bag_slots=4, max_unique_rows=4,
                       update_outstanding_reads=4, relaxed_lookup=False, add_stages=7,
                       mul_stages=7, mean_reciprocal="sequential", fpga_pipelining=True)

#: The engine configuration before four-stage FP units and ``fpga_pipelining``, over
#: :data:`ENGINE_DEFAULTS`: the ECPIX-5 design routes with it (``boards.synth``), and the
#: per-block ``emb_*`` figures were measured with it (``boards.blocks``).
TWO_STAGE_ENGINE_PARAMS = dict(add_stages=2, mul_stages=2, fpga_pipelining=False)

_INCR = 1
_OUTPUT_CHOICE_COPIES = 16

_LOOKUP_ONLY = ("max_unique_rows", "update_outstanding_reads", "relaxed_lookup",
                "correction_bags")


def _lookup_engine(params):
    from hw.emb.lookup import LookupEngine

    return LookupEngine(**{k: v for k, v in params.items() if k not in _LOOKUP_ONLY})


def _update_engine(params):
    from hw.emb.update import UpdateEngine

    names = ("max_tables", "max_dim", "num_regions", "addr_width", "id_width",
             "max_unique_rows", "relaxed_lookup", "correction_bags", "add_stages",
             "mul_stages", "fpga_pipelining", "lane_fold")
    return UpdateEngine(**{k: params[k] for k in names if k in params},
                        outstanding_reads=params["update_outstanding_reads"])


#: What :class:`EngineUnderTest` can hold: the device core, or one of its two engines alone
#: (each answers only its own opcode; they share the command and AXI formats).
ENGINES = {
    "embedding": lambda params: EmbeddingEngine(**params),
    "lookup": _lookup_engine,
    "update": _update_engine,
}


def config_layout(*, addr_width, max_tables, num_regions):
    return data.StructLayout({
        "tables": data.ArrayLayout(table_layout(addr_width), max_tables),
        "regions": data.ArrayLayout(region_layout(addr_width), num_regions),
        "lr": unsigned(32),
    })


def step_layout(*, addr_width, max_tables, num_regions):
    """The stimulus word of :class:`EngineUnderTest`: a :class:`Step` and its argument."""
    read = data.StructLayout({"line": unsigned(addr_width - 6), "length": unsigned(8)})
    return data.StructLayout({
        "step": Step,
        "arg": data.UnionLayout({
            "config": config_layout(addr_width=addr_width, max_tables=max_tables,
                                    num_regions=num_regions),
            "command": command_layout(addr_width),
            "read": read,
        }),
    })


def check_engine(engine):
    """Raise ``ValueError`` unless ``engine`` names an entry of :data:`ENGINES`."""
    if engine not in ENGINES:
        raise ValueError(f"Engine must be one of {', '.join(map(repr, ENGINES))}, not "
                         f"{engine!r}")


class EngineUnderTest(wiring.Component):
    """:class:`~hw.emb.engine.EmbeddingEngine` on an :class:`~boards.bist.axi_bram.AxiBram`,
    driven by steps (module docstring).

    Parameters (keyword-only)
    -------------------------
    memory_init : sequence of int
        The memory's initial lines (512-bit integers).
    memory_depth : int
        Lines of memory (at least ``len(memory_init)``).
    engine : str
        A key of :data:`ENGINES`: ``"embedding"`` (the default) or one engine alone.
    **engine_params :
        Passed to :class:`~hw.emb.engine.EmbeddingEngine` (or the engine's share of them);
        missing ones come from :data:`ENGINE_DEFAULTS`.

    Members
    -------
    i : ``In(stream.Signature(step_layout(...)))``
    o : ``Out(stream.Signature(512))``
        Statuses and lines read, from a :class:`~hw.skid.SkidBuffer`: a line a cycle after
        the memory gives it, a status two after the engine does (through a skid buffer of
        its own first).
    """

    def __init__(self, *, memory_init, memory_depth, engine="embedding", **engine_params):
        check_engine(engine)
        params = {**ENGINE_DEFAULTS, **engine_params}
        self.engine = ENGINES[engine](params)
        self.memory = AxiBram(depth=memory_depth, init=memory_init,
                              addr_width=params["addr_width"], id_width=params["id_width"])
        self.params = params
        self.layout = step_layout(addr_width=params["addr_width"],
                                  max_tables=params["max_tables"],
                                  num_regions=params["num_regions"])
        super().__init__({
            "i": In(stream.Signature(self.layout)),
            "o": Out(stream.Signature(unsigned(LINE_BITS))),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        m.submodules.memory = memory = self.memory
        step = self.i.payload
        bus, slave = engine.axi, memory.axi
        size = (LINE_BITS // 8).bit_length() - 1

        tables = Signal.like(engine.tables)
        regions = Signal.like(engine.regions)
        lr = Signal(32)
        command = Signal.like(engine.cmd.payload)
        command_valid = Signal()
        ar_valid = Signal()
        ar_line = Signal(self.params["addr_width"] - 6)
        ar_len = Signal(8)
        m.d.comb += [
            engine.tables.eq(tables),
            engine.regions.eq(regions),
            engine.cmd.payload.eq(command),
            engine.cmd.valid.eq(command_valid),
        ]
        if "lr" in engine.signature.members:
            m.d.comb += engine.lr.eq(lr)

        # Memory port: the engine's while a command runs, the sequencer's otherwise. Data and
        # addresses of the write channels and R/B data fan out unmuxed; only handshakes switch.
        # Who owns it is a flip-flop of its own (in state Command), not the state's decode: it
        # gates every handshake the engine and the memory see (a ULX3S build's paths from the
        # sequencer's state through the memory's `bvalid` into the update engine's state,
        # 18.5 ns, and through `rready` into the memory's read queue, 17.8 ns).
        engine_owns = Signal()
        engine_owns_next = Signal()  # what `engine_owns` holds the next cycle
        m.d.comb += engine_owns_next.eq(engine_owns)
        m.d.sync += engine_owns.eq(engine_owns_next)
        m.d.comb += [
            slave.arid.eq(Mux(engine_owns, bus.arid, 0)),
            slave.araddr.eq(Mux(engine_owns, bus.araddr, ar_line << 6)),
            slave.arlen.eq(Mux(engine_owns, bus.arlen, ar_len)),
            slave.arsize.eq(size),
            slave.arburst.eq(_INCR),
            slave.arvalid.eq(Mux(engine_owns, bus.arvalid, ar_valid)),
            bus.arready.eq(engine_owns & slave.arready),
            bus.rid.eq(slave.rid),
            bus.rdata.eq(slave.rdata),
            bus.rresp.eq(slave.rresp),
            bus.rlast.eq(slave.rlast),
            bus.rvalid.eq(engine_owns & slave.rvalid),
            slave.awid.eq(bus.awid),
            slave.awaddr.eq(bus.awaddr),
            slave.awlen.eq(bus.awlen),
            slave.awsize.eq(bus.awsize),
            slave.awburst.eq(bus.awburst),
            slave.awvalid.eq(engine_owns & bus.awvalid),
            bus.awready.eq(engine_owns & slave.awready),
            slave.wdata.eq(bus.wdata),
            slave.wstrb.eq(bus.wstrb),
            slave.wlast.eq(bus.wlast),
            slave.wvalid.eq(engine_owns & bus.wvalid),
            bus.wready.eq(engine_owns & slave.wready),
            bus.bid.eq(slave.bid),
            bus.bresp.eq(slave.bresp),
            bus.bvalid.eq(engine_owns & slave.bvalid),
            slave.bready.eq(~engine_owns | bus.bready),
        ]

        # Statuses and read data reach the self-test through a skid buffer: the engine's
        # `done` and the memory's read data would otherwise decide the check runner's result
        # counter in the same cycle (a ULX3S build's paths into `received`).
        m.submodules.output = output = SkidBuffer(shape=unsigned(LINE_BITS))
        wiring.connect(m, output.o, wiring.flipped(self.o))
        out = output.i
        # The engine's status passes a skid buffer of its own first: its `valid` and fields
        # come through the engine's dispatch from the state of the engine that ran, and
        # then no longer reach the 512-bit output register's choice in the same cycle (a
        # ULX3S build's 320 paths into the output).
        m.submodules.status = status = SkidBuffer(shape=engine.done.payload.shape())
        wiring.connect(m, engine.done, status.i)
        # (Outside Command the sequencer's own reads are the only ones: no beat comes back in
        # Idle.)
        # The 512-bit choice between them is made by copies of `engine_owns`, one per 32
        # bits (one register spread over every bit's multiplexer was a ULX3S build's 14.2 ns
        # path into the output).
        status_line = Signal(LINE_BITS)  # zero-extended, as the output carries it
        m.d.comb += status_line.eq(status.o.payload.as_value())
        choices = replicated_register(m, engine_owns_next, copies=_OUTPUT_CHOICE_COPIES,
                                      name="engine_owns_output")
        part = LINE_BITS // _OUTPUT_CHOICE_COPIES
        for copy, chosen in enumerate(choices):
            bits = slice(copy * part, (copy + 1) * part)
            m.d.comb += out.payload[bits].eq(Mux(chosen, status_line[bits], slave.rdata[bits]))
        m.d.comb += [
            out.valid.eq(Mux(engine_owns, status.o.valid, slave.rvalid)),
            status.o.ready.eq(engine_owns & out.ready),
            slave.rready.eq(Mux(engine_owns, bus.rready, out.ready)),
        ]

        with m.FSM(name="sequencer"):
            with m.State("Idle"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    with m.Switch(step.step):
                        with m.Case(Step.CONFIG):
                            config = step.arg.config
                            m.d.sync += [tables.eq(config.tables), regions.eq(config.regions),
                                         lr.eq(config.lr)]
                        with m.Case(Step.COMMAND):
                            m.d.sync += [command.eq(step.arg.command), command_valid.eq(1)]
                            m.d.comb += engine_owns_next.eq(1)
                            m.next = "Command"
                        with m.Case(Step.READ):
                            m.d.sync += [ar_valid.eq(1), ar_line.eq(step.arg.read.line),
                                         ar_len.eq(step.arg.read.length)]
                            m.next = "Read"
            with m.State("Command"):
                with m.If(engine.cmd.ready):
                    m.d.sync += command_valid.eq(0)
                with m.If(status.o.valid & out.ready):
                    m.d.comb += engine_owns_next.eq(0)
                    m.next = "Idle"
            with m.State("Read"):
                with m.If(slave.arready):
                    m.d.sync += ar_valid.eq(0)
                with m.If(slave.rvalid & out.ready & slave.rlast):
                    m.next = "Idle"
        return m
