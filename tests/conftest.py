import os
from pathlib import Path

import pytest
import torch

import vanilla_transformer  # noqa: F401  (registers the Auto classes)
from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

# pytest -n 2 runs two workers on two cores: more threads per worker only make them wait for each other
torch.set_num_threads(1)

# The project's data (Multi30k, WMT14) lives beside the checkout, as on the development machines and in CI; a
# checkout elsewhere names the folder with VANILLA_TRANSFORMER_SHARED_DATA.
SHARED_DATA = Path(
    os.environ.get("VANILLA_TRANSFORMER_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)
MULTI30K = SHARED_DATA / "multi30k"


def pytest_sessionstart(session: pytest.Session) -> None:
    if not (MULTI30K / "train.en").is_file():
        raise pytest.UsageError(
            f"the Multi30k files are not in {MULTI30K}: the tests read ../shared/data beside the checkout; set "
            f"VANILLA_TRANSFORMER_SHARED_DATA to the folder that holds multi30k/."
        )


VOCAB = 64
PAD, BOS, EOS = 0, 1, 2


def tiny_config(**overrides) -> VanillaTransformerConfig:
    """A 2+2-layer model small enough for exact CPU checks; dropout off unless a test turns it on."""
    values = {
        "vocab_size": VOCAB,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "dropout": 0.0,
        "max_position_embeddings": 64,
    }
    values.update(overrides)
    return VanillaTransformerConfig(**values)


def tiny_model(seed: int = 0, **overrides) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration(tiny_config(**overrides)).eval()


def random_batch(batch_size: int = 3, src_len: int = 9, tgt_len: int = 7, seed: int = 0) -> dict:
    """Source and target ids without special tokens, with some right padding in the source."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, VOCAB, (batch_size, src_len), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(1, batch_size):
        attention_mask[row, src_len - 2 * row :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, PAD)
    decoder_input_ids = torch.randint(3, VOCAB, (batch_size, tgt_len), generator=generator)
    decoder_input_ids[:, 0] = BOS
    return {"input_ids": input_ids, "attention_mask": attention_mask, "decoder_input_ids": decoder_input_ids}


@pytest.fixture
def model() -> VanillaTransformerForConditionalGeneration:
    return tiny_model()


@pytest.fixture
def batch() -> dict:
    return random_batch()


@pytest.fixture(scope="session")
def builtin_tokenizer():
    """The joint BPE trained on the built-in corpus (real tokenizer, built in about a second)."""
    from vanilla_transformer.data.corpora import load_builtin
    from vanilla_transformer.tokenization import train_joint_bpe

    pairs = load_builtin("train")["translation"]
    return train_joint_bpe([p["en"] for p in pairs] + [p["de"] for p in pairs], vocab_size=600)
