"""Loaded (PYTHONPATH) by the processes bench/faults.py starts: they import this checkout only.

A virtual environment with the project installed in editable mode from another checkout has a
finder that answers for every module of the project's packages that this checkout lacks, so a
process restarted mid-run could load a newer module from there beside this checkout's older ones
(measured: every page a 500 after a web worker restarted). The bench measures this checkout."""

import sys

sys.meta_path[:] = [finder for finder in sys.meta_path if "__editable__" not in getattr(finder, "__module__", "")
                    and "__editable__" not in type(finder).__module__]
