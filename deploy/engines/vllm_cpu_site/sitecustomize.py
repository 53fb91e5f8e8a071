"""Makes torchvision importable in the vLLM-on-CPU engine environment, in every Python process
of a worker: this folder is on the PYTHONPATH the local runtime gives vLLM-on-CPU workers (and
the install check and the random-weights step), so Python imports this module at start-up
(``site`` imports ``sitecustomize``). It only registers an import hook; torch is not imported
until something imports torchvision.

Why it exists. PyPI has no CPU build of torchvision: ``torchvision==0.28.0`` there (the release
that matches torch 2.13) links ``libtorch_cuda.so``, so under ``torch==2.13.0+cpu`` its ``_C``
extension does not load. torchvision copes with that everywhere but in
``torchvision/_meta_registrations.py``, whose two ``@torch.library.register_fake("torchvision::nms")``
and ``("torchvision::qnms")`` decorators are unguarded and raise "operator torchvision::nms does
not exist". transformers imports torchvision (``image_processing_qwen2_vl``, and
``image_processing_auto`` from ``vllm/transformers_utils/config.py``) on ``dynamo.vllm``'s import
chain, so with torchvision as shipped ``python -m dynamo.vllm`` does not start, and without it
neither (ModuleNotFoundError from ``dynamo/vllm/multimodal_utils/models/qwen.py``).

Why a ``sitecustomize`` and not a launcher the worker runs as: vLLM starts Python processes of
its own that a launcher never sees (``python -m vllm.model_executor.models.registry`` to inspect
a model architecture, its EngineCore and Worker); an environment variable reaches them all.

What it does, and nothing else: just before torchvision is first imported, when torchvision's
own ``_C`` does not load, it *defines* the two operator schemas (those torchvision's C++
registers, ``csrc/ops/nms.cpp``) in the ``torchvision`` namespace with ``torch.library``, so the
fake registrations have an operator to attach to. No kernel is registered: calling
``torchvision.ops.nms`` still raises torchvision's "Couldn't load custom C++ ops", which nothing
on a text model's path does. No installed file is changed. Where torchvision's ``_C`` loads (a
matching CPU build), it defines nothing. Standard library and torch only."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None  # kept alive: a torch.library.Library removes its definitions when collected


def torchvision_ops_loadable() -> bool:
    """Whether torchvision's own ``_C`` extension loads here (found without importing torchvision)."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    for folder in spec.submodule_search_locations:
        for lib in sorted(Path(folder).glob("_C*.so")):
            try:
                torch.ops.load_library(str(lib))
                return True
            except (OSError, RuntimeError):
                return False
    return False


def define_missing_schemas() -> bool:
    """Define torchvision::nms and ::qnms when torchvision cannot; True when it defined them."""
    global _library
    if _library is not None or importlib.util.find_spec("torchvision") is None or torchvision_ops_loadable():
        return False
    import torch

    _library = torch.library.Library("torchvision", "DEF")
    for schema in SCHEMAS:
        _library.define(schema)
    return True


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs ``define_missing_schemas`` once, when torchvision is about to be imported; finds nothing."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            sys.meta_path.remove(self)
            define_missing_schemas()
        return None


if not any(isinstance(finder, _BeforeTorchvision) for finder in sys.meta_path):
    sys.meta_path.insert(0, _BeforeTorchvision())
