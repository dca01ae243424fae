"""`python -m vanilla_transformer ARGS` with accelerate's FSDP allowed on the CPU, for `accelerate launch --use_fsdp`.

accelerate (1.15) turns FSDP on only for accelerator devices: on a CPU-only machine `accelerate launch --use_fsdp ...`
forms a gloo group of type MULTI_CPU, drops the FSDP plugin it read from the launcher without a word, and wraps the
model in DDP. torch's FSDP2 (`fully_shard`) itself runs on the CPU over gloo. This wrapper makes accelerate's state
FSDP where it would have dropped the plugin, exactly as it does on GPUs (`AcceleratorState.__init__`), and changes
nothing else: every FSDP code path of accelerate, transformers and this package then runs as on GPUs, on CPU tensors.

    accelerate launch --num_processes 2 --use_fsdp --fsdp_version 2 tests/fsdp_on_cpu.py train ...
"""

import runpy
import sys

from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType

_init = AcceleratorState.__init__


def _init_with_fsdp_on_cpu(self, *args, fsdp_plugin=None, **kwargs) -> None:
    _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.fsdp_plugin = fsdp_plugin
        # PartialState keeps its own copy, which AcceleratorState() reads back each time it is built
        self.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
        print(f"fsdp_on_cpu: process {self.process_index} runs FSDP{fsdp_plugin.fsdp_version} on the CPU", flush=True)


AcceleratorState.__init__ = _init_with_fsdp_on_cpu

if __name__ == "__main__":
    sys.argv = ["vanilla-transformer", *sys.argv[1:]]
    runpy.run_module("vanilla_transformer", run_name="__main__", alter_sys=True)
