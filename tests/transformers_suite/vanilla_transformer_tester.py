"""transformers' own common model tests (`ModelTesterMixin`, `GenerationTesterMixin`, `ConfigTester`) run on our
model, as on any library model. `run.sh` beside this file brings those tests (from the transformers source
distribution on PyPI, where `GenerationTesterMixin` is a stub, or from a transformers checkout's `tests/` folder);
this module is the model-specific part, shaped like `tests/models/marian/test_modeling_marian.py`."""

import unittest
from unittest import mock

from tests.generation.test_utils import GenerationTesterMixin
from tests.test_configuration_common import ConfigTester
from tests.test_modeling_common import ModelTesterMixin, ids_tensor
from transformers.models.auto import modeling_auto

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)
from vanilla_transformer.model.generation_vanilla_transformer import PAPER_GENERATION_DEFAULTS

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
        attention_mask = input_ids.ne(config.pad_token_id)
        inputs = {
            "input_ids": input_ids,
            "decoder_input_ids": decoder_input_ids,
            "attention_mask": attention_mask,
            # all ones, as in Marian's and Bart's testers: GenerationTesterMixin's continue-from-cache test extends a
            # decoder mask at the end although `generate` put the decoder start token in front, which misaligns a
            # mask that masks something
            "decoder_attention_mask": attention_mask,
        }
        return config, inputs

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class VanillaTransformerModelTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (VanillaTransformerModel, VanillaTransformerForConditionalGeneration)
    # what ModelTesterMixin derives from `can_generate()`, spelled out
    all_generative_model_classes = (VanillaTransformerForConditionalGeneration,)
    is_encoder_decoder = True

    def setUp(self):
        self.model_tester = VanillaTransformerModelTester(self)
        self.config_tester = ConfigTester(self, config_class=VanillaTransformerConfig)

    def test_config(self):
        self.config_tester.run_common_tests()

    if hasattr(GenerationTesterMixin, "test_generate_continue_from_past_key_values"):  # not in the stub

        def test_generate_continue_from_past_key_values(self):
            # The mixin generates with the model's default decoding and continues from the cache it returns, which
            # assumes transformers' default, greedy search: a beam search (the paper's or transformers' own) returns
            # the cache of its running beams, not of the sequences it returns, so it cannot be continued. The test
            # runs as the mixin has it, with the paper's defaults but one beam.
            with mock.patch.dict(PAPER_GENERATION_DEFAULTS, {"num_beams": 1}):
                super().test_generate_continue_from_past_key_values()
