"""What training does under FSDP (`accelerate launch --use_fsdp`) besides what accelerate does (docs/fsdp.md).

The model shares one matrix between four modules (§3.4): `model.shared`, the encoder's and the decoder's
`embed_tokens` and `lm_head`. FSDP2 refuses a parameter that two of its groups reach, and accelerate groups only the
encoder's embeddings with the output projection, so the first forward stopped with "Parameter ... is shared with a
parameter already managed by another FSDP group". `shard_tied_embeddings` puts all four into one group first.
"""

import logging
import os

import torch
from accelerate import Accelerator
from accelerate.utils import parse_flag_from_env

from ..errors import SettingsError
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

logger = logging.getLogger(__name__)


def tied_modules(model: torch.nn.Module) -> list[list[torch.nn.Module]]:
    """The modules of `model` that hold a parameter together with another module, one list per shared parameter."""
    holders: dict[int, list[torch.nn.Module]] = {}
    for module in model.modules():  # each module once, however many names it has
        for parameter in module.parameters(recurse=False):
            holders.setdefault(id(parameter), []).append(module)
    return [modules for modules in holders.values() if len(modules) > 1]


def shard_tied_embeddings(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """Under FSDP2, wrap each group of modules that share a parameter in one FSDP group, with accelerate's mesh and
    policies, before `accelerator.prepare` (the optimizer comes after). It turns off accelerate's
    `cpu_ram_efficient_loading`, which would reload a state dict now holding a sharded tensor; every process built the
    same model from its config and seed, so there is nothing to load."""
    if not getattr(accelerator, "is_fsdp2", False):
        return
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    plugin = accelerator.state.fsdp_plugin
    plugin.cpu_ram_efficient_loading = False
    mesh = getattr(accelerator, "torch_device_mesh", None)  # what accelerate's fsdp2_prepare_model passes
    if mesh is not None:
        mesh = mesh[tuple(accelerator.parallelism_config.fsdp_dim_names)]
    for modules in tied_modules(model):
        if not any(isinstance(module, FSDPModule) for module in modules):
            fully_shard(
                modules,
                mesh=mesh,
                # accelerate keeps its own embeddings-and-head group gathered from forward to backward, too
                reshard_after_forward=False,
                mp_policy=plugin.mixed_precision_policy or MixedPrecisionPolicy(),
                offload_policy=plugin.cpu_offload,
            )


def fsdp_problems(config: VanillaTransformerConfig) -> list[str]:
    """What an FSDP launch asks that cannot work, found on any machine (accelerate drops FSDP without a GPU): a layer
    class to wrap that the model lacks, and a sharded state dict."""
    if not parse_flag_from_env("ACCELERATE_USE_FSDP"):
        return []
    found = []
    with torch.device("meta"):  # its classes only: no memory, no time
        classes = {type(module).__name__ for module in VanillaTransformerForConditionalGeneration(config).modules()}
    names = (name.strip() for name in os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").split(","))
    unknown = [name for name in names if name and name not in classes]
    if unknown:
        layers = sorted(name for name in classes if name.endswith("Layer"))
        found.append(
            f"--fsdp_transformer_layer_cls_to_wrap names {', '.join(unknown)}, which the model does not have: give "
            f"its layer classes, {','.join(layers)}."
        )
    version = os.environ.get("FSDP_VERSION", "1")
    state_dict_type = os.environ.get("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT" if version == "1" else "SHARDED")
    if "FULL" not in state_dict_type.upper():
        found.append(_sharded_trainer_message(state_dict_type))
    return found


def warn_if_fsdp_dropped(accelerator: Accelerator) -> None:
    """Say so where an FSDP launch trains with DDP, as accelerate does without a GPU, without a word."""
    if parse_flag_from_env("ACCELERATE_USE_FSDP") and getattr(accelerator.state, "fsdp_plugin", None) is None:
        logger.warning(
            "launched with FSDP, but accelerate uses FSDP only on GPUs (and other accelerators): this run trains "
            "with DDP, every process holding the whole model and optimizer state. Launch without --use_fsdp on this "
            "machine (docs/fsdp.md)."
        )


def _sharded_trainer_message(state_dict_type: str) -> str:
    return (
        f"FSDP with state dict type {state_dict_type.rsplit('.', 1)[-1]} writes the Trainer's checkpoints without "
        "model.safetensors, which resuming and --average-last read: launch `train` with `--fsdp_state_dict_type "
        "FULL_STATE_DICT` (or fsdp_state_dict_type: FULL_STATE_DICT in the accelerate config)."
    )


def check_trainer_fsdp(accelerator: Accelerator) -> None:
    """Refuse, before training, a state dict type (FSDP2's default) that leaves checkpoints without weights files."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is not None and "FULL_STATE_DICT" not in str(plugin.state_dict_type):
        raise SettingsError(_sharded_trainer_message(str(plugin.state_dict_type)))
