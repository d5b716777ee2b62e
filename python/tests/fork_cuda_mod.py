"""A module that is unsafe to preload (test_fork_server.py): it stands for torch with CUDA
initialised (a module "torch" whose torch.cuda.is_initialized() is true), for machines without
a GPU."""

import sys
import types

_torch = types.ModuleType("torch")
_torch.cuda = types.SimpleNamespace(is_initialized=lambda: True)
sys.modules["torch"] = _torch
