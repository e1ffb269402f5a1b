"""The main job: a DLRM training run with a power failure, recovery and resumption.

    python -m tb.demo [--preset tiny] [--batches 24] [--seed S]

Today this runs on the golden model only: the device's checkpoint engine and CXL front end are
not built yet (see README, "What exists"), so the "device" here is the NumPy golden DLRM
together with the checkpoint oracle, and the output says so. The run:

1. trains the preset and records every batch (loss, pooled outputs, table digests);
2. fails power at a seeded random batch and phase;
3. recovers to the state the persistence contract prescribes (tables as after the last
   committed batch, MLP from the newest complete snapshot);
4. resumes training to the end, and checks that the resumed run is bit-exact with an
   independent golden replay along the same path (exit status 1 on any mismatch).
"""

import argparse
import random
import sys
import time

from sw_model import get_preset
from sw_model.checkpoint import (
    CheckpointOracle,
    Failure,
    Phase,
    first_table_difference,
    is_snapshot_batch,
)
from sw_model.train import TrainState, train


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m tb.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tiny", help="preset name (default: tiny)")
    parser.add_argument("--batches", type=int, default=24, help="batches to train (default 24)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the power-failure point (default: random, printed)")
    args = parser.parse_args(argv)
    if args.batches < 2:
        parser.error(f"--batches must be at least 2, not {args.batches}")
    return args


def main(argv=None) -> int:
    args = _parse(argv)
    preset = get_preset(args.preset)
    seed = random.randrange(2**31) if args.seed is None else args.seed
    draw = random.Random(seed)
    print("TrainingCXL demo: GOLDEN MODEL ONLY - the device RTL does not take part in this run "
          "yet (checkpoint engine and CXL front end pending).")
    print(f"preset={preset.name} batches={args.batches} seed={seed} "
          f"snapshot_interval={preset.snapshot_interval}")

    started = time.perf_counter()
    oracle = CheckpointOracle(preset)
    reference = oracle.golden_run(stop=args.batches)
    for record in reference.records:
        print(f"  batch {record.number:3d}  loss {record.loss:.5f}")

    batch = draw.randrange(1, args.batches)
    phases = [p for p in Phase  # only snapshot batches have a snapshot phase
              if p is not Phase.SNAPSHOT or is_snapshot_batch(batch, preset.snapshot_interval)]
    failure = Failure(batch, draw.choice(phases))
    allowed = oracle.acceptable(failure)
    committed, snapshot = draw.choice(allowed.committed), draw.choice(allowed.snapshot)
    print(f"power failure during {failure.phase.value} of batch {failure.batch}: "
          f"recovered to last committed batch {committed}, MLP snapshot of batch {snapshot}")
    recovered = oracle.recovered_state(failure, reported_committed=committed,
                                       reported_snapshot=snapshot)

    resumed = oracle.continue_training(recovered, stop=args.batches)
    for record in resumed.records:
        print(f"  resumed batch {record.number:3d}  loss {record.loss:.5f}")

    # An independent replay of the same path: train from scratch to the committed batch, swap
    # in the snapshot's MLP, train on. It must agree with the oracle's continuation to the bit.
    replay = train(preset, stop=committed + 1) if committed >= 0 else None
    tables = replay.state.tables if replay else oracle.state_after(-1).tables
    mlp = (train(preset, stop=snapshot + 1).state.mlp if snapshot >= 0
           else oracle.state_after(-1).mlp)
    replayed = train(preset, TrainState(tables, mlp, committed + 1), stop=args.batches)
    difference = first_table_difference(replayed.state.tables, resumed.state.tables)
    digests_equal = all(a.table_digests == b.table_digests
                        for a, b in zip(replayed.records, resumed.records, strict=True))
    elapsed = time.perf_counter() - started
    if difference is None and digests_equal:
        print(f"PASS: resumed run bit-exact with the golden replay ({elapsed:.1f} s)")
        return 0
    print(f"FAIL: resumed run differs from the golden replay: {difference}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
