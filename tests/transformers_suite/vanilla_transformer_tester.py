"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`) run on our model, as on any library
model. `run.sh` beside this file fetches those tests from the transformers source distribution on PyPI; this
module is the model-specific part, shaped like `tests/models/marian/test_modeling_marian.py`."""

import unittest

from tests.test_configuration_common import ConfigTester
from tests.test_modeling_common import ModelTesterMixin, ids_tensor
from transformers.models.auto import modeling_auto

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)

# The mixin finds label and head conventions by class name in the static mappings, which `Auto*.register` leaves.
modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.setdefault(
    "vanilla_transformer", "VanillaTransformerForConditionalGeneration"
)
modeling_auto.MODEL_MAPPING_NAMES.setdefault("vanilla_transformer", "VanillaTransformerModel")


class VanillaTransformerModelTester:
    def __init__(self, parent, batch_size=13, seq_length=7, vocab_size=99, hidden_size=16, num_layers=2, heads=4):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_layers
        self.num_attention_heads = heads
        self.is_training = True

    def get_config(self) -> VanillaTransformerConfig:
        return VanillaTransformerConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=4,
            decoder_ffn_dim=4,
            dropout=0.1,
            attention_dropout=0.1,
            max_position_embeddings=100,
            bos_token_id=0,
            pad_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=3,
        )

    def prepare_config_and_inputs(self):
        config = self.get_config()
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = config.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        inputs = {
            "input_ids": input_ids,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": input_ids.ne(config.pad_token_id),
            "decoder_attention_mask": decoder_input_ids.ne(config.pad_token_id),
        }
        return config, inputs

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class VanillaTransformerModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (VanillaTransformerModel, VanillaTransformerForConditionalGeneration)
    is_encoder_decoder = True

    def setUp(self):
        self.model_tester = VanillaTransformerModelTester(self)
        self.config_tester = ConfigTester(self, config_class=VanillaTransformerConfig)

    def test_config(self):
        self.config_tester.run_common_tests()
