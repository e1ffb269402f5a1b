"""Formal harness of the checkpoint engine's ordering rules (DESIGN.md section 4, invariants
1-3), observed at its ports only.

The CheckpointEngine runs on free inputs: any command sequence, an abstract embedding engine
(any AXI requests at any time, any status once it has a command), and an abstract memory
(any timing, any data, but a B or R response only for a request of its class that is still
outstanding). Shadow counters built from the memory port classify every write by its AXI ID
(the engine's own writes carry ``2**id_width - 4 + OwnWrite``) and check, at every cycle:

* **log before flag** (invariant 2): a batch-flag write is issued only while no LOG write is
  outstanding and no log entry or header is still waiting on chip (``log_pending``), and only
  for an UPDATE in progress;
* **flag before in-place writes** (invariants 1, 2): while an UPDATE is in progress, a write of
  the embedding engine reaches memory only after the batch flag's B response, with no LOG or
  FLAG write outstanding;
* **in-place writes before commit** (invariant 3): the commit record is issued only after the
  embedding engine reported UPDATE done and every one of its writes has its B response;
* **commit before status**: UPDATE is reported successful only after the commit record's B.

Covers show that each of these events is reachable (so the assertions are not vacuous).
"""

from amaranth.asserts import AnyConst, AnySeq, Initial
from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, ResetSignal, Signal
from amaranth.lib import wiring

from hw.ckpt.engine import CheckpointEngine
from hw.ckpt.join import own_id_base
from hw.ckpt.layouts import OwnWrite
from hw.emb.layouts import ErrorCode, Opcode

__all__ = ["FORMAL_PARAMETERS", "OrderingHarness"]

#: The smallest engine that still has every mechanism: one table, 3-bit IDs, a short log
#: buffer, no duplicate filter, three writes in flight per kind.
FORMAL_PARAMETERS = {"addr_width": 12, "id_width": 3, "max_tables": 1, "log_buffer_depth": 8,
                     "dedup_entries": 0, "max_outstanding_writes": 3}

_CONFIG = ("tables", "meta_region", "log_region", "snapshot_regions", "snapshot_interval")


class OrderingHarness(Elaboratable):
    """``engine_class`` (CheckpointEngine or a mutant) on free inputs, with the shadow model
    and the assertions of the module docstring."""

    def __init__(self, engine_class=CheckpointEngine, **parameters):
        self.engine_class = engine_class
        self.parameters = {**FORMAL_PARAMETERS, **parameters}

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.engine_class(**self.parameters)
        m.d.comb += Assume(ResetSignal() == Initial())

        # --- free inputs: configuration fixed, everything else any value every cycle ------
        for path, member, value in dut.signature.flatten(dut):
            if member.flow != wiring.In:
                continue
            free = AnyConst(value.shape()) if path[0] in _CONFIG else AnySeq(value.shape())
            m.d.comb += value.eq(free)
        m.d.comb += dut.logging_enable.eq(1)

        axi = dut.axi
        base = own_id_base(self.parameters["id_width"])

        def own(kind):
            return base + kind.value

        aw_fire = axi.awvalid & axi.awready
        b_fire = axi.bvalid & axi.bready
        ar_fire = axi.arvalid & axi.arready
        r_fire = axi.rvalid & axi.rready

        # --- shadow counters at the memory port -------------------------------------------
        def outstanding(name, issued, completed, width=6):
            count = Signal(width, name=name)
            m.d.sync += count.eq(count + issued - completed)
            return count

        counts = {}
        for kind in OwnWrite:
            counts[kind] = outstanding(
                f"out_{kind.name.lower()}", aw_fire & (axi.awid == own(kind)),
                b_fire & (axi.bid == own(kind)))
        engine_writes = outstanding("out_engine", aw_fire & (axi.awid < base),
                                    b_fire & (axi.bid < base))
        own_reads = outstanding("own_reads", ar_fire & (axi.arid >= base),
                                r_fire & axi.rlast & (axi.rid >= base), width=8)
        engine_reads = outstanding("engine_reads", ar_fire & (axi.arid < base),
                                   r_fire & axi.rlast & (axi.rid < base), width=8)

        # The memory answers only what was asked (its timing and data are free).
        b_count = Signal.like(engine_writes)
        with m.If(axi.bid < base):
            m.d.comb += b_count.eq(engine_writes)
        for kind in OwnWrite:
            with m.If(axi.bid == own(kind)):
                m.d.comb += b_count.eq(counts[kind])
        m.d.comb += [
            Assume(~axi.bvalid | (b_count != 0)),
            Assume(~axi.rvalid | ((axi.rid >= base) & (own_reads != 0))
                   | ((axi.rid < base) & (engine_reads != 0))),
        ]

        # The abstract embedding engine reports done only for a command it has taken.
        engine_busy = Signal()
        with m.If(dut.engine_cmd.valid & dut.engine_cmd.ready):
            m.d.sync += engine_busy.eq(1)
        with m.If(dut.engine_done.valid & dut.engine_done.ready):
            m.d.sync += engine_busy.eq(0)
        m.d.comb += Assume(~dut.engine_done.valid | engine_busy)

        # --- the UPDATE in progress (from the command port's view) -------------------------
        updating = Signal()       # UPDATE accepted on cmd, its status not yet returned
        flag_persisted = Signal()  # a FLAG write completed during this UPDATE
        engine_finished = Signal()  # the embedding engine reported this UPDATE done
        commit_persisted = Signal()
        cmd_fire = dut.cmd.valid & dut.cmd.ready
        done_fire = dut.done.valid & dut.done.ready
        with m.If(cmd_fire & (dut.cmd.payload.opcode == Opcode.UPDATE)):
            m.d.sync += [updating.eq(1), flag_persisted.eq(0), engine_finished.eq(0),
                         commit_persisted.eq(0)]
        with m.If(done_fire):
            m.d.sync += updating.eq(0)
        with m.If(b_fire & (axi.bid == own(OwnWrite.FLAG)) & updating):
            m.d.sync += flag_persisted.eq(1)
        with m.If(dut.engine_done.valid & dut.engine_done.ready & updating):
            m.d.sync += engine_finished.eq(1)
        with m.If(b_fire & (axi.bid == own(OwnWrite.COMMIT)) & updating):
            m.d.sync += commit_persisted.eq(1)

        engine_write = aw_fire & (axi.awid < base)
        flag_write = aw_fire & (axi.awid == own(OwnWrite.FLAG))
        commit_write = aw_fire & (axi.awid == own(OwnWrite.COMMIT))
        with m.If(flag_write):
            m.d.comb += Assert(updating & (counts[OwnWrite.LOG] == 0) & ~dut.log_pending)
        with m.If(engine_write & updating):
            m.d.comb += Assert(flag_persisted & (counts[OwnWrite.LOG] == 0)
                               & (counts[OwnWrite.FLAG] == 0))
        with m.If(commit_write):
            m.d.comb += Assert(updating & engine_finished & (engine_writes == 0))
        with m.If(done_fire & updating & (dut.done.payload.error == ErrorCode.NONE)):
            m.d.comb += Assert(commit_persisted)

        m.d.comb += [
            Cover(engine_write & updating),
            Cover(commit_write),
            Cover(done_fire & updating & (dut.done.payload.error == ErrorCode.NONE)),
        ]
        return m
