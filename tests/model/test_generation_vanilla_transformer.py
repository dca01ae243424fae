"""transformers' contracts for `generate()`: the paper's beam search returns what transformers' beam search returns,
and decoding with a static cache compiles once (`torch.compile`, `CompileConfig(fullgraph=True, dynamic=False)`)."""

import pytest
import torch
from conftest import EOS, PAD, VOCAB, tiny_model
from torch._dynamo.utils import counters
from transformers import CompileConfig

from vanilla_transformer.model.generation_vanilla_transformer import CACHE_OUTPUT_NAME


def eos_prone_model(seed: int, scale: float = 2.5):
    """A tiny random model whose hypotheses end with EOS at different lengths."""
    model = tiny_model(seed).eval()
    model.set_attn_implementation("eager")  # attention weights are returned by eager attention only
    with torch.no_grad():
        model.model.shared.weight[EOS] *= scale
    return model


def sources(batch_size: int, length: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, VOCAB, (batch_size, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, length - 2 :] = 0  # one padded sentence
    input_ids[0, length - 2 :] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def assert_same(ours, theirs, name: str) -> None:
    if isinstance(theirs, torch.Tensor):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5, msg=name)
    elif isinstance(theirs, tuple | list):
        assert isinstance(ours, tuple | list) and len(ours) == len(theirs), name
        for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(mine, other, f"{name}[{index}]")
    else:
        assert ours == theirs, name


@pytest.mark.parametrize(("seed", "num_beams", "num_return_sequences"), [(0, 4, 2), (2, 2, 1), (3, 4, 4)])
def test_paper_beam_search_returns_what_transformers_beam_search_returns(seed, num_beams, num_return_sequences):
    """With α = 0 the GNMT penalty and transformers' |Y|^α are both 1, and with no per-sentence limit the two searches
    must agree on everything they return: hypotheses, their scores, per-step processed scores and raw logits,
    beam indices, attentions and hidden states, for each of `num_return_sequences` hypotheses per sentence.

    transformers' `early_stopping="never"` stops, at α = 0, exactly when no running hypothesis can still win, which is
    what the paper's beam search does with `early_stopping=True`; so both run the same number of steps."""
    model = eos_prone_model(seed)
    inputs = sources(3, 6, seed)
    common = {
        **inputs,
        "num_beams": num_beams,
        "num_return_sequences": num_return_sequences,
        "length_penalty": 0.0,
        "max_new_tokens": 10,
        "max_new_tokens_over_input": None,
        "return_dict_in_generate": True,
        "output_scores": True,
        "output_logits": True,
        "output_attentions": True,
        "output_hidden_states": True,
    }
    ours = model.generate(**common, early_stopping=True)
    theirs = model.generate(**common, early_stopping="never", length_penalty_form="hf")
    assert type(ours) is type(theirs)
    ended = ours.sequences == EOS
    assert ended.any(dim=1).any() and not ended.any(dim=1).all()  # not trivial: some end with EOS, some at the limit
    # transformers pads finished rows with EOS when pad_token_id is 0 (`pad_token_id or eos_token_id`)
    assert torch.equal(ours.sequences.masked_fill(ours.sequences == 0, EOS), theirs.sequences)
    assert ours.sequences.shape[0] == 3 * num_return_sequences
    for name in (
        "sequences_scores",
        "scores",
        "logits",
        "beam_indices",
        "encoder_attentions",
        "encoder_hidden_states",
        "decoder_attentions",
        "cross_attentions",
        "decoder_hidden_states",
    ):
        assert getattr(theirs, name) is not None, name
        assert_same(getattr(ours, name), getattr(theirs, name), name)
    assert getattr(ours, CACHE_OUTPUT_NAME) is not None


def test_scores_reconstruct_the_sequence_scores():
    """`compute_transition_scores` (transformers' recipe for beam search) gives back each hypothesis' summed
    log-probability from `scores` and `beam_indices`; divided by the GNMT penalty it is `sequences_scores`."""
    model = eos_prone_model(3)
    out = model.generate(**sources(2, 5, 3), num_return_sequences=4, return_dict_in_generate=True, output_scores=True)
    transition = model.compute_transition_scores(out.sequences, out.scores, out.beam_indices, normalize_logits=False)
    lengths = (out.beam_indices >= 0).sum(dim=1)
    penalty = ((5.0 + lengths) / 6.0) ** model.generation_config.length_penalty
    torch.testing.assert_close(transition.sum(dim=1) / penalty, out.sequences_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("num_beams", [1, 4], ids=["greedy", "paper-beam-search"])
@pytest.mark.slow
def test_compiled_static_cache_decoding_matches_eager_and_compiles_once(num_beams):
    """Greedy search (transformers' loop) and the paper's beam search with `cache_implementation="static"` and
    `CompileConfig(fullgraph=True, dynamic=False)`: the tokens of eager decoding, and no new graph for a shorter
    source of the same batch size (the source is padded, masked, to the longest one seen) or fewer new tokens."""
    model = tiny_model().eval()
    compile_config = CompileConfig(fullgraph=True, dynamic=False)
    compile_config._compile_all_devices = True  # transformers compiles on accelerators only, unless told
    compiled = {"cache_implementation": "static", "compile_config": compile_config, "num_beams": num_beams}
    counters.clear()
    for length, seed, new_tokens in ((9, 0, 8), (6, 1, 8), (3, 2, 8), (9, 3, 8), (9, 4, 5)):
        inputs = sources(2, length, seed)
        eager = model.generate(**inputs, num_beams=num_beams, max_new_tokens=new_tokens)
        assert torch.equal(model.generate(**inputs, max_new_tokens=new_tokens, **compiled), eager), length
        if seed == 0:
            graphs = counters["stats"]["unique_graphs"]
            assert graphs >= 1  # the decoding step was compiled
    assert counters["stats"]["unique_graphs"] == graphs  # and never again


def padded_batch(sources: list[list[int]], side: str) -> dict:
    width = max(len(source) for source in sources)
    input_ids = torch.full((len(sources), width), PAD)
    attention_mask = torch.zeros_like(input_ids)
    for row, source in enumerate(sources):
        columns = slice(0, len(source)) if side == "right" else slice(width - len(source), width)
        input_ids[row, columns], attention_mask[row, columns] = torch.tensor(source), 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def generated(row: list[int]) -> list[int]:
    tokens = row[1:]
    return tokens[: tokens.index(EOS) + 1] if EOS in tokens else [token for token in tokens if token != PAD]


@pytest.mark.parametrize("num_beams", [1, 4], ids=["greedy", "paper-beam-search"])
@pytest.mark.parametrize("side", ["right", "left", "left-without-mask"])
def test_padding_never_changes_a_translation(side, num_beams):
    """24 sentences of 1 to 12 tokens translated in one padded batch give what each gives alone: positions count
    the tokens of the attention mask, not the padded index (fairseq's `make_positions`), and without a mask
    `generate` derives it from the pad id as transformers does."""
    model = tiny_model(3).eval()
    with torch.no_grad():  # hypotheses end at varied lengths
        model.model.shared.weight[EOS] *= 2.0
    generator = torch.Generator().manual_seed(4)
    lengths = torch.randint(1, 13, (24,), generator=generator).tolist()
    sources = [torch.randint(3, VOCAB, (length,), generator=generator).tolist() for length in lengths]
    batch = padded_batch(sources, side.removesuffix("-without-mask"))
    if side.endswith("without-mask"):
        batch.pop("attention_mask")
    options = {"num_beams": num_beams, "max_new_tokens_over_input": 4}
    together = [generated(row) for row in model.generate(**batch, **options).tolist()]
    alone = [generated(model.generate(input_ids=torch.tensor([source]), **options)[0].tolist()) for source in sources]
    assert together == alone
    assert len({len(tokens) for tokens in alone}) > 3  # translations of many lengths


def test_an_all_padding_row_is_refused_by_name():
    model = tiny_model()
    batch = padded_batch([[5, 6, EOS], [7, EOS]], "right")
    batch["attention_mask"][1] = 0
    with pytest.raises(ValueError, match=r"Source rows \[1\] are all padding"):
        model.generate(**batch)
    batch["input_ids"][1] = PAD
    with pytest.raises(ValueError, match=r"Source rows \[1\] are all padding"):
        model.generate(input_ids=batch["input_ids"], num_beams=1)
