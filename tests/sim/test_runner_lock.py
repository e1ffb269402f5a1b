"""sim.runner's directory lock: a second process waits while one holds a build or run directory
(what lets pytest-xdist workers and a campaign share one build tree)."""

import subprocess
import sys

import pytest

from sim import runner

pytestmark = pytest.mark.skipif(runner.fcntl is None, reason="no advisory locks here")

# Tries the lock without waiting; exit status 0 if it got it, 1 if another process holds it.
_TRY_LOCK = """
import fcntl, sys
with open(sys.argv[1], "w") as lock:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(1)
"""


def _other_process_gets(directory):
    done = subprocess.run([sys.executable, "-c", _TRY_LOCK, str(directory / ".lock")],
                          check=False)
    return done.returncode == 0


def test_a_directory_is_held_for_the_with_body_only(tmp_path):
    directory = tmp_path / "build" / "design"
    with runner._exclusive(directory):
        assert directory.is_dir()
        assert not _other_process_gets(directory)
    assert _other_process_gets(directory)


def test_the_lock_is_released_when_the_body_raises(tmp_path):
    with pytest.raises(RuntimeError), runner._exclusive(tmp_path):
        raise RuntimeError("a failed build")
    assert _other_process_gets(tmp_path)
