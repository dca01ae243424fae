"""What the two training paths do under FSDP2 (`accelerate launch --use_fsdp --fsdp_version 2`) besides what accelerate
does (docs/fsdp.md).

The model shares one matrix between four modules (§3.4): `model.shared`, the encoder's and the decoder's
`embed_tokens` and `lm_head`. FSDP2 (torch >= 2.13) refuses a parameter that two of its groups reach, and accelerate's
`fsdp2_prepare_model` groups only the input embeddings (the encoder's) with the output projection, which leaves
`model.shared` and the decoder's embeddings to the root group: the first forward stopped with "Parameter ... is
shared with a parameter already managed by another FSDP group". `shard_tied_embeddings` puts all of them into one
group before accelerate wraps the rest, as torch's message prescribes.
"""

import logging
import os

import torch
from accelerate import Accelerator
from accelerate.utils import parse_flag_from_env

from ..errors import SettingsError

logger = logging.getLogger(__name__)


def tied_modules(model: torch.nn.Module) -> list[list[torch.nn.Module]]:
    """The modules of `model` that hold a parameter together with another module, one list per shared parameter."""
    holders: dict[int, list[torch.nn.Module]] = {}
    for module in model.modules():  # each module once, however many names it has
        for parameter in module.parameters(recurse=False):
            holders.setdefault(id(parameter), []).append(module)
    return [modules for modules in holders.values() if len(modules) > 1]


def shard_tied_embeddings(accelerator: Accelerator, model: torch.nn.Module) -> None:
    """Under FSDP2, wrap every group of modules that share a parameter (`tied_modules`) in one FSDP group of its own,
    with the mesh and policies accelerate gives its own groups, before `accelerator.prepare`; the optimizer must be
    built afterwards (or by `prepare`, as the Trainer does). Nothing happens without FSDP2.

    It also turns off accelerate's `cpu_ram_efficient_loading` (on by default in `accelerate launch`): that path
    moves the model to the meta device and reloads it from a `model.state_dict()` taken first, which would now hold a
    sharded tensor. There is nothing to load: every process built the model from its config with the same seed."""
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


def fsdp_requested() -> bool:
    """Whether the process was launched with FSDP (`accelerate launch --use_fsdp`, or an accelerate config that
    uses it): the environment accelerate's launcher sets, read whether or not accelerate then uses FSDP."""
    return parse_flag_from_env("ACCELERATE_USE_FSDP")


def check_fsdp_request(model: torch.nn.Module, trainer: bool) -> None:
    """Refuse, before a process group exists, what an FSDP launch asks that cannot work, on any machine (accelerate
    drops FSDP without a GPU, so these would pass there unseen and fail on the GPUs): a layer class to wrap that the
    model does not have (`model` may be on the meta device), and for `train` a state dict type other than
    FULL_STATE_DICT (`check_trainer_fsdp`)."""
    if not fsdp_requested():
        return
    names = [name.strip() for name in os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").split(",") if name.strip()]
    classes = {type(module).__name__ for module in model.modules()}
    unknown = [name for name in names if name not in classes]
    if unknown:
        layers = sorted(name for name in classes if name.endswith("Layer"))
        raise SettingsError(
            f"--fsdp_transformer_layer_cls_to_wrap names {', '.join(unknown)}, which the model does not have: give "
            f"its layer classes, {','.join(layers)}."
        )
    version = os.environ.get("FSDP_VERSION", "1")
    state_dict_type = os.environ.get("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT" if version == "1" else "SHARDED")
    if trainer and "FULL" not in state_dict_type.upper():
        raise SettingsError(_sharded_trainer_message(state_dict_type))


def warn_if_fsdp_dropped(accelerator: Accelerator) -> None:
    """Say so where an FSDP launch trains without FSDP: accelerate turns it on only on accelerator devices, and on a
    machine without one trains every process with the whole model (DDP), without a word."""
    if fsdp_requested() and getattr(accelerator.state, "fsdp_plugin", None) is None:
        logger.warning(
            "launched with FSDP, but accelerate uses FSDP only on GPUs (and other accelerators): this run trains "
            "with DDP, every process holding the whole model and optimizer state. Launch without --use_fsdp on this "
            "machine (docs/fsdp.md)."
        )


def _sharded_trainer_message(state_dict_type: str) -> str:
    return (
        f"FSDP with state dict type {state_dict_type.rsplit('.', 1)[-1]} writes the Trainer's checkpoints without "
        "model.safetensors, which resuming and --average-last read: launch `train` with `--fsdp_state_dict_type "
        "FULL_STATE_DICT` (or fsdp_state_dict_type: FULL_STATE_DICT in the accelerate config); `train-no-trainer` "
        "resumes from either."
    )


def check_trainer_fsdp(accelerator: Accelerator) -> None:
    """Refuse, before training, an FSDP state dict type that leaves the Trainer's checkpoints without
    `model.safetensors`, which resuming (`checkpoints.last_complete_checkpoint`) and averaging into `final/` read: with
    SHARDED_STATE_DICT (FSDP2's default) the Trainer writes the weights as a distributed checkpoint only, so a resumed
    run would start over and the run would stop at its end with no checkpoint to average."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is not None and "FULL_STATE_DICT" not in str(plugin.state_dict_type):
        raise SettingsError(_sharded_trainer_message(str(plugin.state_dict_type)))
