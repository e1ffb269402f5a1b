# amaranth: UnusedElaboratable=no
"""The embedding engine's two engines on one set of FP lanes (``shared_lanes``): parameter
checks, and how many lane units each configuration builds. That the shared lanes compute the
right results is what every Verilator test of the engine, the device and the checkpointed
system checks (``tb/emb``, ``tb/device``, ``tb/ckpt``: LOOKUP and UPDATE interleaved, against
the golden model)."""

import pytest
from amaranth.hdl import Fragment

from hw.emb.engine import EmbeddingEngine
from hw.emb.lookup import LookupEngine
from hw.emb.update import UpdateEngine
from hw.fp import FPLanes

SMALL = dict(max_tables=2, max_dim=32, num_regions=1, addr_width=16, id_width=4,
             outstanding_reads=4, index_buffer_depth=32, offset_buffer_depth=32,
             output_buffer_depth=2, bag_slots=4)


def lane_units(design, *, fold=False):
    """The FPLanes instances in the elaborated design, as ``(op, tag width)`` (with ``fold``,
    ``(op, tag width, fold)``)."""
    found = []

    def walk(fragment):
        for origin in fragment.origins or ():
            if isinstance(origin, FPLanes):
                found.append((origin.op, origin.tag_width) +
                             ((origin.fold,) if fold else ()))
        for subfragment, _, _ in fragment.subfragments:
            walk(subfragment)

    walk(Fragment.get(design, None))
    return sorted(found)


@pytest.mark.parametrize("component", [EmbeddingEngine, LookupEngine, UpdateEngine])
@pytest.mark.parametrize("value", [1, "yes", None])
def test_shared_lanes_must_be_a_bool(component, value):
    with pytest.raises(TypeError, match=rf"^Shared lanes must be True or False, not "
                                        rf"{value!r}$"):
        component(shared_lanes=value)


def test_shared_engine_builds_one_multiplier_and_one_adder():
    engine = EmbeddingEngine(**SMALL, max_unique_rows=4, update_outstanding_reads=4)
    assert engine.shared_lanes
    mul_tag, add_tag = UpdateEngine(
        max_tables=2, max_dim=32, num_regions=1, addr_width=16, id_width=4,
        max_unique_rows=4, outstanding_reads=4).lanes_tag_widths
    # The update engine's tags ride along; the lookup engine's operands leave them 0.
    assert lane_units(engine) == [("add", add_tag), ("mul", mul_tag)]


def test_folded_lanes_are_shared_folded():
    engine = EmbeddingEngine(**SMALL, max_unique_rows=4, update_outstanding_reads=4,
                             relaxed_lookup=False, lane_fold=2)
    assert [(op, fold) for op, _, fold in lane_units(engine, fold=True)] == [("add", 2),
                                                                              ("mul", 2)]
    alone = EmbeddingEngine(**SMALL, max_unique_rows=4, update_outstanding_reads=4,
                            relaxed_lookup=False, lane_fold=4, shared_lanes=False)
    assert {fold for _, _, fold in lane_units(alone, fold=True)} == {4}


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: EmbeddingEngine(**SMALL, lane_fold=2), ValueError,
     "Folded lanes take no correction: lane_fold must be 1 with relaxed_lookup, not 2"),
    (lambda: EmbeddingEngine(**SMALL, relaxed_lookup=False, lane_fold=3), ValueError,
     "Lane fold must be a positive divisor of the lane count 16, not 3"),
    (lambda: LookupEngine(**SMALL, lane_fold=0), ValueError,
     "Lane fold must be a positive divisor of the lane count 16, not 0"),
    (lambda: UpdateEngine(relaxed_lookup=False, lane_fold=2.0), TypeError,
     "Lane fold must be an integer, not 2.0"),
])
def test_lane_fold_is_validated(make, error, message):
    with pytest.raises(error) as info:
        make()
    assert str(info.value) == message


def test_separate_lanes_build_a_set_per_engine():
    engine = EmbeddingEngine(**SMALL, max_unique_rows=4, update_outstanding_reads=4,
                             shared_lanes=False)
    assert not engine.shared_lanes
    units = lane_units(engine)
    assert [op for op, _ in units] == ["add", "add", "mul", "mul"]
    assert sorted(width for _, width in units)[:2] == [0, 0]   # the pooler's, untagged


def test_engines_alone_expose_lane_ports_only_when_shared():
    alone = LookupEngine(**SMALL)
    assert "mul_lanes" not in alone.signature.members
    shared = LookupEngine(**SMALL, shared_lanes=True)
    assert {"mul_lanes", "add_lanes"} <= set(shared.signature.members)
    assert lane_units(shared) == []
    update = UpdateEngine(max_dim=32, addr_width=16, shared_lanes=True)
    mul_tag, add_tag = update.lanes_tag_widths
    assert update.mul_lanes.o.payload.tag.shape().width == mul_tag
    assert update.add_lanes.i.payload.tag.shape().width == add_tag
    assert lane_units(update) == []
