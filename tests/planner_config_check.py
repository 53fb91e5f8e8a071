"""Feeds Planner --config objects to the real ``PlannerConfig`` of the installed Dynamo wheel and
prints, per object, "ok" or the error. ``import dynamo.planner`` fails on a host without
AISimulate, but the config module itself only needs the package's path: register the package
without running its __init__ (in this throwaway process only), then import the module.

    python tests/planner_config_check.py < configs.json   # a JSON list of objects"""

from __future__ import annotations

import json
import logging
import os
import sys
import types

import dynamo

logging.disable(logging.WARNING)
package = types.ModuleType("dynamo.planner")
package.__path__ = [os.path.join(dynamo.__path__[0], "planner")]
sys.modules["dynamo.planner"] = package

from dynamo.planner.config.planner_config import PlannerConfig  # noqa: E402

for config in json.load(sys.stdin):
    try:
        PlannerConfig.model_validate(config)
        print(json.dumps("ok"))
    except Exception as exc:  # the verdict, whatever the type
        print(json.dumps(f"error: {exc}"))
