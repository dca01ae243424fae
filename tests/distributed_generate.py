"""Run by tests/training/test_distributed.py under torchrun: the paper's beam search with `synced_gpus=True` (as FSDP
and ZeRO-3 decode), each process on its own sentences, so that one finishes its search steps earlier than the other.
The main process writes every process's translations and its number of decoder forwards as JSON to the path given."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import EOS, tiny_model  # noqa: E402

if __name__ == "__main__":
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = tiny_model().eval()
    with torch.no_grad():  # hypotheses end at varied lengths
        model.model.shared.weight[EOS] *= 2.5
    forwards = []
    model.lm_head.register_forward_hook(lambda *args: forwards.append(1))
    # process 0: a sentence that may run to 3 + 2 tokens; process 1: up to 9 + 2 tokens
    length = 3 if rank == 0 else 9
    source = torch.randint(3, 64, (1, length), generator=torch.Generator().manual_seed(rank))
    output = model.generate(input_ids=source, synced_gpus=True, max_new_tokens_over_input=2)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"source": source.tolist(), "output": output.tolist(), "forwards": len(forwards)})
    if rank == 0:
        Path(sys.argv[1]).write_text(json.dumps(gathered))
    dist.destroy_process_group()
