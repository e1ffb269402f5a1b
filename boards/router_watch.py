"""Stop a place-and-route run whose router2 no longer converges.

router2 negotiates congestion: after each iteration nextpnr logs ``iter=N wires=W
overused=K ...``, and K falls towards 0 when the design will route. On a placement it
cannot route, K reaches a lowest value and then rises for as long as nextpnr is let run
(hours for the ULX3S ``emb`` design at nextpnr's seed 0: 610 overused wires at iteration 25,
5,101 at 77). A converging run's count wavers too, by a few wires near its end, so the run
counts as diverging only once the count is both ``factor`` times its lowest and ``margin``
wires above it (:class:`RouterDivergence`). Over the logs of the builds in
``docs/measurements.md``'s section on seeds, the defaults stop that seed-0 build at iteration
45 (1,266 against 610) and none of the builds that routed. A count that stalls without
rising that far (300-500 wires for 300 iterations with router2's alternative weights at
seed 0; 340-380 from iteration 200 to 218 and on, at `34bbd04` and seed 1) is stopped once
``stall`` iterations have passed without a new lowest count: the builds that routed found
a new lowest at most 80 iterations after the one before (and end on 0, a new lowest).

:func:`run_watched` runs a build script, follows nextpnr's log as it grows, and stops the
script's whole process group when the check says so (:class:`RoutingDiverged`).
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["RouterDivergence", "RoutingDiverged", "run_watched"]

_PROGRESS = re.compile(r"\biter=(\d+)\s+wires=\d+\s+overused=(\d+)")


class RoutingDiverged(RuntimeError):
    """router2's overused wires rose far above their lowest count; the build was stopped."""


class RouterDivergence:
    """Follows router2's per-iteration overuse (:meth:`feed` a log line at a time)."""

    def __init__(self, *, factor=2.0, margin=500, stall=150):
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 1:
            raise ValueError(f"Factor must be a number above 1, not {factor!r}")
        if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
            raise ValueError(f"Margin must be a non-negative integer, not {margin!r}")
        if isinstance(stall, bool) or not isinstance(stall, int) or stall < 1:
            raise ValueError(f"Stall must be a positive integer, not {stall!r}")
        self._stall = stall
        self._factor = factor
        self._margin = margin
        self.best = None          # (iteration, overused wires) with the fewest so far
        self.last = None          # the latest (iteration, overused wires)

    def feed(self, line):
        """Take one log line; return why routing diverges (a sentence), or ``None``."""
        match = _PROGRESS.search(line)
        if match is None:
            return None
        iteration, overused = int(match.group(1)), int(match.group(2))
        self.last = (iteration, overused)
        if self.best is None or overused < self.best[1]:
            self.best = self.last
            return None
        best_iteration, best = self.best
        if overused >= self._factor * best and overused >= best + self._margin:
            return (f"router2 is not converging: {overused:,} overused wires at iteration "
                    f"{iteration}, against {best:,} at iteration {best_iteration}")
        if iteration - best_iteration >= self._stall:
            return (f"router2 is not converging: {overused:,} overused wires at iteration "
                    f"{iteration}, and none below {best:,} (iteration {best_iteration}) "
                    f"in {iteration - best_iteration} iterations")
        return None


def _stop(process):
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_watched(command, *, cwd, env, log, check, poll_seconds=2.0):
    """Run ``command`` in ``cwd`` with ``env`` and feed each new line of the file ``log`` to
    ``check`` (``None``: no check; else an object with ``feed(line)`` as
    :class:`RouterDivergence`). When ``feed`` returns a reason, stop the command's process
    group and raise :class:`RoutingDiverged` with it. A command that fails raises
    :class:`subprocess.CalledProcessError`, as :func:`subprocess.check_call` does."""
    log = Path(cwd) / log
    log.unlink(missing_ok=True)   # a log of an earlier build must not be read as this one's
    process = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
    position, pending = 0, ""
    try:
        while True:
            finished = process.poll() is not None
            if check is not None and log.exists():
                with log.open("r", errors="replace") as file:
                    file.seek(position)
                    pending += file.read()
                    position = file.tell()
                *lines, pending = pending.split("\n")
                for line in lines:
                    reason = check.feed(line)
                    if reason is not None:
                        _stop(process)
                        raise RoutingDiverged(reason)
            if finished:
                break
            time.sleep(poll_seconds)
    except BaseException:
        _stop(process)    # (also on Ctrl-C: no nextpnr left running)
        raise
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, command)
