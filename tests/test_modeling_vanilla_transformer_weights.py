"""The model refuses weights that no training yields (`modeling_vanilla_transformer.check_weight_values`, run by
`from_pretrained`): NaN, Inf and magnitudes >= 2^64 written into a real saved folder's model.safetensors are named
when the folder is loaded through transformers' Auto classes, in this process and, as Hub remote code, in a process
where this package cannot be imported."""

import math
import re
from pathlib import Path

import pytest
import torch
from conftest import tiny_config, tiny_model
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, AutoModelForSeq2SeqLM

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.model.modeling_vanilla_transformer import HUGE_WEIGHT, check_weight_values
from vanilla_transformer.release.remote_code import generate_without_package

TENSOR = "model.encoder.layers.0.ffn.fc1.weight"  # 64 x 32 in the tiny model, and tied to nothing
FIX = "Restore the folder from a good copy, load an earlier checkpoint, or re-train."
INSPECT = "(To inspect them, load with refuse_impossible_weights=False.)"


@pytest.fixture
def folder(tmp_path) -> Path:
    """A tiny model saved as `save_pretrained` writes it, with the remote code files beside its weights."""
    tiny_model().save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def write_values(folder: Path, values: dict[str, float]) -> None:
    """Put each value into one element of its tensor in model.safetensors, as a diverged run or a flipped bit would."""
    tensors = load_file(folder / "model.safetensors")
    for name, value in values.items():
        tensors[name].view(-1)[5] = value
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def test_a_good_folder_loads_with_and_without_loading_info(folder):
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert isinstance(model, VanillaTransformerForConditionalGeneration)
    model, info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True)
    assert isinstance(model, VanillaTransformerForConditionalGeneration) and not info["missing_keys"]
    assert torch.equal(model.model.encoder.layers[0].ffn.fc1.weight, load_file(folder / "model.safetensors")[TENSOR])


@pytest.mark.parametrize(
    "value, dtype, problem",
    [
        (math.nan, None, "1 NaN"),
        (-math.inf, None, "1 Inf"),
        (2.0**70, None, "1 of magnitude >= 2^64"),
        (-(2.0**64), None, "1 of magnitude >= 2^64"),
        (math.nan, torch.bfloat16, "1 NaN"),
        (2.0**70, torch.bfloat16, "1 of magnitude >= 2^64"),
        (math.nan, torch.float16, "1 NaN"),
        (2.0**70, torch.float16, "1 Inf"),  # float16 tops out at 65504: the cast makes it Inf
    ],
    ids=["nan", "inf", "2^70", "-2^64", "nan-bf16", "2^70-bf16", "nan-fp16", "2^70-fp16"],
)
def test_impossible_weights_are_refused_naming_the_tensor_the_folder_and_the_fix(folder, value, dtype, problem):
    write_values(folder, {TENSOR: value})
    with pytest.raises(ValueError) as error:
        AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=dtype)
    message = str(error.value)
    assert message.startswith(f"{folder} holds impossible weights in 1 tensor(s): {TENSOR} ({problem} of 2048 values)")
    assert FIX in message and message.endswith(INSPECT) and "\n" not in message
    # the float16 hint only where float16 made the Inf
    assert ("load them in float32 or bfloat16" in message) == (dtype == torch.float16 and problem == "1 Inf")
    # the base model (AutoModel, also in every Hub folder's auto_map) refuses them too, with output_loading_info; it
    # names the tensor as its own, without the `model.` of the full model
    base_name = TENSOR.removeprefix("model.")
    with pytest.raises(ValueError, match=re.escape(f"{folder} holds impossible weights in 1 tensor(s): {base_name} (")):
        AutoModel.from_pretrained(folder, dtype=dtype, output_loading_info=True)


def test_refuse_impossible_weights_false_loads_them_for_inspection(folder):
    write_values(folder, {TENSOR: math.nan})
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, refuse_impossible_weights=False)
    assert model.model.encoder.layers[0].ffn.fc1.weight.view(-1)[5].isnan()
    assert "refuse_impossible_weights" not in model.config.to_dict()  # taken by from_pretrained, not the config
    base, info = AutoModel.from_pretrained(folder, refuse_impossible_weights=False, output_loading_info=True)
    assert base.encoder.layers[0].ffn.fc1.weight.view(-1)[5].isnan() and not info["missing_keys"]


def test_a_value_just_below_the_bound_loads(folder):
    write_values(folder, {TENSOR: 2.0**63})  # absurd for a weight, but a float32 square still holds it
    assert AutoModelForSeq2SeqLM.from_pretrained(folder).model.encoder.layers[0].ffn.fc1.weight.view(-1)[5] == 2.0**63


def test_every_bad_tensor_is_counted_a_tied_one_once_and_five_are_listed(folder):
    names = sorted(name for name in load_file(folder / "model.safetensors") if name.endswith("proj.weight"))[:7]
    write_values(folder, {name: math.nan for name in names} | {"model.shared.weight": math.inf})
    with pytest.raises(ValueError) as error:
        AutoModelForSeq2SeqLM.from_pretrained(folder)
    message = str(error.value)
    # model.shared.weight is also both stacks' embeddings and lm_head.weight: one tensor, named once
    assert f"holds impossible weights in {len(names) + 1} tensor(s): model.shared.weight (1 Inf of 2048 values); " in (
        message
    )
    assert f"; and {len(names) + 1 - 5} more. NaN and Inf come from a run that diverged" in message
    assert "lm_head" not in message and "embed_tokens" not in message


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e5m2])
def test_the_check_reads_every_float_type_and_skips_what_is_not_loaded(dtype):
    """float8 has no aminmax, isnan or abs kernel on the CPU: the check upcasts it instead of failing."""
    module = nn.Module()
    module.register_buffer("steps", torch.tensor([3, 2**62]))  # not floating point: never a weight value
    module.weight = nn.Parameter(torch.tensor([0.5, -1.0, 2.0]).to(dtype), requires_grad=False)
    check_weight_values(module, "here")
    module.weight = nn.Parameter(torch.tensor([0.5, math.nan, -math.inf, 1.0]).to(dtype), requires_grad=False)
    with pytest.raises(
        ValueError, match=r"^here holds impossible weights in 1 tensor\(s\): weight \(1 NaN, 1 Inf of 4"
    ):
        check_weight_values(module, "here")
    if dtype in (torch.float32, torch.bfloat16):  # the types that hold 2^64
        module.weight = nn.Parameter(torch.tensor([HUGE_WEIGHT, 1.0]).to(dtype), requires_grad=False)
        with pytest.raises(ValueError, match=r"weight \(1 of magnitude >= 2\^64 of 2 values\)"):
            check_weight_values(module, "here")
    # a model on the meta device has no values yet (device_map offloading leaves some there): nothing to judge
    with torch.device("meta"):
        check_weight_values(VanillaTransformerForConditionalGeneration(tiny_config()), "meta")


@pytest.mark.slow
def test_the_hub_path_without_this_package_refuses_them_too(folder):
    """As a Hub user loads it: `AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)` in a process
    that cannot import vanilla_transformer, so that the check can only come from the remote code in the folder."""
    inputs = {"input_ids": torch.tensor([[5, 6, 7, 2]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    assert len(generate_without_package(folder, inputs, max_new_tokens=3)) == 1  # the intact folder loads there
    write_values(folder, {TENSOR: 2.0**70})
    with pytest.raises(RuntimeError) as error:
        generate_without_package(folder, inputs, max_new_tokens=3)
    resolved = folder.resolve()
    assert (
        f"ValueError: {resolved} holds impossible weights in 1 tensor(s): {TENSOR} (1 of magnitude >= 2^64 of 2048 "
        f"values)" in str(error.value)
    )
    assert "transformers_modules" in str(error.value)  # raised by the folder's own copy of the modeling file
