"""The Transformer of *Attention Is All You Need* (Vaswani et al. 2017) as a Hugging Face `transformers` model.

Importing this package registers `model_type="vanilla_transformer"` with `AutoConfig`, `AutoModel` and
`AutoModelForSeq2SeqLM`, and marks the classes for remote code, so that `save_pretrained` writes an `auto_map` for
all three Auto classes and copies the two code files next to the weights.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .model.configuration_vanilla_transformer import PRESETS, VanillaTransformerConfig
from .model.modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
    shift_tokens_right,
    sinusoidal_position_encoding,
)

__version__ = "0.1.0"

AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True)

VanillaTransformerConfig.register_for_auto_class()
VanillaTransformerModel.register_for_auto_class("AutoModel")
VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "PRESETS",
    "VanillaTransformerConfig",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "shift_tokens_right",
    "sinusoidal_position_encoding",
]
