"""The paper's decoding (§6.1) through `generate`, and `translate`: beam 4, GNMT length penalty (Wu et al. 2016),
maximum output length = input length + 50, exact early stopping."""

import json
from pathlib import Path

import pytest
import torch
from conftest import BOS, EOS, PAD, VOCAB, tiny_model
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    AutoModelForSeq2SeqLM,
    GenerationConfig,
    GenerationMixin,
    LogitsProcessorList,
    MaxTimeCriteria,
    PreTrainedTokenizerFast,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
)
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli.main import main
from vanilla_transformer.errors import VanillaTransformerError
from vanilla_transformer.inference.translation import translate
from vanilla_transformer.model.generation_vanilla_transformer import PAPER_GENERATION_DEFAULTS, gnmt_length_penalty
from vanilla_transformer.release.remote_code import generate_without_package

ROOT = Path(__file__).resolve().parents[2]
GENERATION_MODULE = "vanilla_transformer.model.generation_vanilla_transformer"


def count_decoding_steps(model) -> list:
    """A list that grows by one per decoding step (one call of the output projection)."""
    steps = []
    model.lm_head.register_forward_hook(lambda *args: steps.append(1))
    return steps


def eos_prone_model(seed: int = 0, scale: float = 4.0) -> VanillaTransformerForConditionalGeneration:
    """A tiny random model whose EOS logit is spread wide (its tied embedding row scaled), so that hypotheses end
    at different lengths instead of all running to the maximum length."""
    model = tiny_model(seed)
    with torch.no_grad():
        model.model.shared.weight[EOS] *= scale
    return model


def padded(sources: list[list[int]]) -> dict:
    width = max(len(source) for source in sources)
    input_ids = torch.full((len(sources), width), PAD)
    attention_mask = torch.zeros((len(sources), width), dtype=torch.long)
    for row, source in enumerate(sources):
        input_ids[row, : len(source)] = torch.tensor(source)
        attention_mask[row, : len(source)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def random_sources(lengths: list[int], seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (length,), generator=generator).tolist() for length in lengths]


def generated_tokens(row: list[int]) -> list[int]:
    """The tokens after the decoder start token, up to and including EOS, without the padding after it."""
    tokens = row[1:]
    return tokens[: tokens.index(EOS) + 1] if EOS in tokens else [token for token in tokens if token != PAD]


@torch.no_grad()
def sum_log_prob(model, source: list[int], tokens: list[int]) -> float:
    """log P(tokens | source) by teacher forcing, the decoder reading [BOS] + tokens[:-1]."""
    logits = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([[BOS, *tokens[:-1]]])).logits
    log_probs = torch.log_softmax(logits[0].double(), dim=-1)
    return sum(log_probs[position, token].item() for position, token in enumerate(tokens))


# --- the length penalty ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("length", "alpha"), [(0, 0.6), (1, 0.6), (7, 0.6), (19, 0.6), (50, 0.6), (10, 1.0), (3, 0)])
def test_gnmt_length_penalty_is_the_formula_of_wu_et_al(length, alpha):
    assert gnmt_length_penalty(length, alpha) == pytest.approx(((5 + length) / 6) ** alpha, rel=1e-12)
    as_tensor = gnmt_length_penalty(torch.tensor([float(length)]), alpha)
    assert as_tensor.item() == pytest.approx(((5 + length) / 6) ** alpha, rel=1e-6)


def test_gnmt_length_penalty_known_values():
    assert gnmt_length_penalty(1, 0.6) == 1.0  # a one-token output is not penalized
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2**0.6)  # (5 + 7) / 6 = 2
    assert gnmt_length_penalty(25, 0.6) == pytest.approx(5**0.6)
    # HF's |Y|^α is another formula: at |Y| = 10 it divides by 3.98 where GNMT divides by 1.73
    assert 10**0.6 == pytest.approx(3.981, abs=1e-3)
    assert gnmt_length_penalty(10, 0.6) == pytest.approx(1.733, abs=1e-3)


# --- the batched beam search against a hand-written one ----------------------------------------------------


@torch.no_grad()
def reference_beam_search(model, source, num_beams, alpha, max_new_tokens, early_stopping=True):
    """§6.1 written out plainly for one sentence: lists, a full forward pass per hypothesis and step, no cache.

    The best 2·num_beams continuations are taken by summed log-probability; those among the best num_beams that end
    (EOS, or the maximum length) are scored log P / ((5 + |Y|) / 6)^α and kept if among the num_beams best finished;
    the best num_beams that do not end run on. Stop when nothing runs, or when the best running log-probability
    divided by lp(max_new_tokens) cannot beat the worst of num_beams finished scores. Returns the finished
    hypotheses, best first, and the number of decoding steps taken.
    """
    running = [([BOS], 0.0)]
    finished = []
    for length in range(1, max_new_tokens + 1):
        candidates = []
        for tokens, log_prob in running:
            logits = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([tokens])).logits
            next_log_probs = torch.log_softmax(logits[0, -1].float(), dim=-1).tolist()
            candidates += [(log_prob + lp, [*tokens, token]) for token, lp in enumerate(next_log_probs)]
        candidates.sort(key=lambda candidate: -candidate[0])
        running = []
        for rank, (log_prob, tokens) in enumerate(candidates[: 2 * num_beams]):
            if tokens[-1] == EOS or length == max_new_tokens:
                if rank < num_beams:
                    finished.append((log_prob / ((5 + length) / 6) ** alpha, tokens))
            elif len(running) < num_beams:
                running.append((tokens, log_prob))
        finished = sorted(finished, key=lambda hypothesis: -hypothesis[0])[:num_beams]
        if not running:
            break
        best_possible = running[0][1] / ((5 + max_new_tokens) / 6) ** alpha
        if early_stopping and len(finished) == num_beams and best_possible <= finished[-1][0]:
            break
    return finished, length


@pytest.mark.parametrize(("num_beams", "seed", "scale"), [(2, 0, 2.0), (4, 0, 2.0), (4, 3, 4.0), (4, 5, 3.0)])
def test_beam_search_matches_a_hand_written_beam_search(num_beams, seed, scale, monkeypatch):
    model = eos_prone_model(seed, scale)
    offset = 4
    sources = random_sources([7, 3, 5], seed=seed)  # padded to 7 in the batch
    out = model.generate(
        **padded(sources),
        num_beams=num_beams,
        num_return_sequences=num_beams,
        max_new_tokens_over_input=offset,
        return_dict_in_generate=True,
    )
    rows, scores = out.sequences.tolist(), out.sequences_scores.tolist()
    assert all(row[0] == BOS for row in rows)
    steps = count_decoding_steps(model)
    lengths_seen = set()
    for index, source in enumerate(sources):
        expected, expected_steps = reference_beam_search(model, source, num_beams, 0.6, len(source) + offset)
        assert len(expected) == num_beams
        # alone, the sentence stops at the very step the exact bound allows: not later, and not earlier
        steps.clear()
        model.generate(input_ids=torch.tensor([source]), num_beams=num_beams, max_new_tokens_over_input=offset)
        assert len(steps) == expected_steps, index
        for rank, (expected_score, expected_tokens) in enumerate(expected):
            row = rows[index * num_beams + rank]
            assert row[: len(expected_tokens)] == expected_tokens, (index, rank)
            assert all(token == PAD for token in row[len(expected_tokens) :])  # padding after EOS
            assert scores[index * num_beams + rank] == pytest.approx(expected_score, rel=1e-4, abs=1e-4)
            lengths_seen.add((len(expected_tokens) - 1, expected_tokens[-1] == EOS))
    # the case is not trivial: hypotheses ended with EOS at several lengths
    assert len({length for length, ended in lengths_seen if ended}) >= 3


def test_scores_are_log_probability_over_gnmt_penalty_and_hypotheses_are_sorted():
    model = eos_prone_model(0, scale=2.0)
    sources = random_sources([6, 4], seed=5)
    out = model.generate(
        **padded(sources), num_return_sequences=4, max_new_tokens_over_input=6, return_dict_in_generate=True
    )
    ended = [generated_tokens(row)[-1] == EOS for row in out.sequences.tolist()]
    assert any(ended) and not all(ended)  # hypotheses closed by EOS and by the maximum length
    scores = out.sequences_scores.view(2, 4)
    assert torch.all(scores[:, :-1] >= scores[:, 1:])
    for index, row in enumerate(out.sequences.tolist()):
        tokens = generated_tokens(row)
        expected = sum_log_prob(model, sources[index // 4], tokens) / gnmt_length_penalty(len(tokens), 0.6)
        assert out.sequences_scores[index].item() == pytest.approx(expected, rel=1e-4)


def test_early_stopping_is_exact_and_saves_steps(monkeypatch):
    model = eos_prone_model(2)
    inputs = padded(random_sources([8, 5, 6, 3], seed=2))
    steps = count_decoding_steps(model)
    common = {"num_return_sequences": 4, "return_dict_in_generate": True, "max_new_tokens_over_input": 10}
    early = model.generate(**inputs, early_stopping=True, **common)
    early_steps = len(steps)
    steps.clear()
    late = model.generate(**inputs, early_stopping=False, **common)
    assert torch.equal(early.sequences, late.sequences)
    torch.testing.assert_close(early.sequences_scores, late.sequences_scores)
    assert early_steps < len(steps)


def test_with_and_without_cache_agree():
    model = eos_prone_model(3)
    inputs = padded(random_sources([6, 2, 4], seed=3))
    cached = model.generate(**inputs, num_return_sequences=2, return_dict_in_generate=True)
    uncached = model.generate(**inputs, num_return_sequences=2, return_dict_in_generate=True, use_cache=False)
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, rtol=1e-5, atol=1e-5)


def test_padding_does_not_change_a_sentence():
    model = eos_prone_model(5, scale=3.0)
    sources = random_sources([9, 3, 6], seed=4)
    batched = model.generate(**padded(sources), return_dict_in_generate=True)
    for index, source in enumerate(sources):
        alone = model.generate(input_ids=torch.tensor([source]), return_dict_in_generate=True)
        assert generated_tokens(batched.sequences[index].tolist()) == generated_tokens(alone.sequences[0].tolist())
        assert batched.sequences_scores[index].item() == pytest.approx(alone.sequences_scores[0].item(), abs=1e-5)


def test_supported_logits_processors_apply():
    model = eos_prone_model(5)
    inputs = padded(random_sources([5, 4], seed=6))
    out = model.generate(**inputs, min_new_tokens=6, no_repeat_ngram_size=1, num_return_sequences=4)
    for row in out.tolist():
        tokens = generated_tokens(row)
        assert len(tokens) >= 6
        assert len(set(tokens)) == len(tokens)  # no token repeats


# --- the GNMT penalty and HF's |Y|^α pick different translations ----------------------------------------


def test_gnmt_and_hf_length_penalties_choose_different_outputs():
    # a model and source where the two formulas disagree (found by a search over seeds)
    model = eos_prone_model(31, scale=2.0)
    source = torch.randint(3, VOCAB, (1, 5), generator=torch.Generator().manual_seed(31))
    common = {"input_ids": source, "max_new_tokens": 12, "max_new_tokens_over_input": None}
    gnmt = generated_tokens(model.generate(**common).tolist()[0])
    hf = generated_tokens(model.generate(**common, length_penalty_form="hf", early_stopping="never").tolist()[0])
    assert gnmt != hf
    assert gnmt[-1] == hf[-1] == EOS and len(gnmt) != len(hf)
    # and each choice is right under its own formula
    gnmt_log_prob = sum_log_prob(model, source[0].tolist(), gnmt)
    hf_log_prob = sum_log_prob(model, source[0].tolist(), hf)
    assert gnmt_log_prob / gnmt_length_penalty(len(gnmt), 0.6) > hf_log_prob / gnmt_length_penalty(len(hf), 0.6)
    assert hf_log_prob / len(hf) ** 0.6 > gnmt_log_prob / len(gnmt) ** 0.6


# --- maximum output length = input length + offset, per sentence -------------------------------------------


@pytest.mark.parametrize(
    "route",
    [{}, {"num_beams": 1}, {"length_penalty_form": "hf"}, {"num_beams": 1, "do_sample": True}],
    ids=["paper-beam", "greedy", "hf-beam", "sample"],
)
def test_each_sentence_stops_at_its_own_input_length_plus_offset(route):
    model = tiny_model()
    sources = random_sources([2, 7, 4, 1], seed=7)
    # EOS (and padding) suppressed: every hypothesis runs to its sentence's maximum length
    never_ends = {"suppress_tokens": [PAD, EOS], **route}
    # transformers' beam search fills with EOS, not padding, when pad_token_id is 0 (`pad_token_id or eos_token_id`)
    fill = {PAD, EOS} if route.get("length_penalty_form") == "hf" else {PAD}
    out = model.generate(**padded(sources), max_new_tokens_over_input=3, **never_ends)
    assert out.shape == (4, 1 + 7 + 3)
    for row, source in zip(out.tolist(), sources, strict=True):
        assert row[0] == BOS
        generated = row[1:]
        assert not fill & set(generated[: len(source) + 3]) and set(generated[len(source) + 3 :]) <= fill
    # an explicit max_new_tokens caps the per-sentence limit further
    capped = model.generate(**padded(sources), max_new_tokens=6, max_new_tokens_over_input=3, **never_ends)
    assert [len([t for t in row[1:] if t not in fill]) for row in capped.tolist()] == [5, 6, 6, 4]  # min(input+3, 6)


def test_learned_positions_cap_the_output_limit_with_a_warning():
    model = tiny_model(position_encoding="learned", max_position_embeddings=8)
    sources = random_sources([2, 6], seed=7)
    never_ends = {"suppress_tokens": [PAD, EOS], "num_beams": 1}
    with CaptureLogger(logging.get_logger(GENERATION_MODULE)) as captured:
        out = model.generate(**padded(sources), max_new_tokens_over_input=3, **never_ends)
    # input + 3 is 5 and 9 tokens; the table holds 8 positions, the first of them taken by the start token
    assert [len([t for t in row[1:] if t != PAD]) for row in out.tolist()] == [5, 7]
    assert "capped at max_position_embeddings=8" in captured.out


def test_default_limit_is_input_length_plus_50():
    model = tiny_model()
    source = random_sources([3], seed=8)
    out = model.generate(input_ids=torch.tensor(source), suppress_tokens=[EOS], num_beams=2)
    assert out.shape == (1, 1 + 3 + 50)  # not transformers' default of 20 new tokens


def test_an_explicit_max_new_tokens_above_the_papers_limit_says_the_limit_still_applies():
    model = tiny_model()
    source = random_sources([3], seed=8)
    for num_beams in (1, 2):  # transformers' greedy search with the stopping criterion, and the paper's beam search
        with CaptureLogger(logging.get_logger(GENERATION_MODULE)) as captured:
            out = model.generate(input_ids=torch.tensor(source), suppress_tokens=[EOS], num_beams=num_beams,
                                 max_new_tokens=2000 + num_beams)  # fmt: skip
        assert out.shape == (1, 1 + 3 + 50)  # input + 50, as the message says, not 2000
        assert f"max_new_tokens={2000 + num_beams}, but the paper's limit of input length + 50 tokens" in captured.out
        assert "max_new_tokens_over_input=None to lift it" in captured.out
    lifted = model.generate(input_ids=torch.tensor(source), suppress_tokens=[EOS], num_beams=1, max_new_tokens=60,
                            max_new_tokens_over_input=None)  # fmt: skip
    assert lifted.shape == (1, 1 + 60)


def test_generate_names_an_empty_batch_and_ids_that_are_no_tensor():
    with pytest.raises(ValueError, match=r"input_ids holds no sentences \(shape \(0, 4\)\): there is nothing"):
        tiny_model().generate(input_ids=torch.zeros(0, 4, dtype=torch.long))
    for ids in ([[5, 6, 2]], (5, 6, 2)):
        with pytest.raises(TypeError, match=r"input_ids is a (list|tuple), not a tensor .* return_tensors='pt'"):
            tiny_model().generate(input_ids=ids)
        with pytest.raises(TypeError, match="not a tensor"):
            tiny_model().generate(ids)


# --- greedy and the HF form decode as transformers' own loops do -------------------------------------------


@pytest.mark.parametrize(
    ("route", "options", "hf_method"),
    [
        ({"num_beams": 1}, {}, "_sample"),
        ({"length_penalty_form": "hf"}, {}, "_beam_search"),
    ],
    ids=["greedy", "hf-beam"],
)
def test_greedy_and_hf_form_use_transformers_generate(monkeypatch, route, options, hf_method):
    model = eos_prone_model(6)
    inputs = padded(random_sources([5, 3], seed=9))
    calls = []
    cls = VanillaTransformerForConditionalGeneration
    original = getattr(cls, hf_method)

    def spy(*args, **kwargs):
        calls.append(hf_method)
        return original(*args, **kwargs)

    def paper_beam_search(*args, **kwargs):
        raise AssertionError("the paper's beam search must not run")

    monkeypatch.setattr(cls, hf_method, spy)
    monkeypatch.setattr(cls, "_paper_beam_search", paper_beam_search)
    out = model.generate(**inputs, max_new_tokens=6, **route, **options)
    assert calls == [hf_method]
    expected = GenerationMixin.generate(model, **inputs, max_new_tokens=6, **route)
    assert torch.equal(out, expected)


def test_paper_beam_search_is_the_default_route(monkeypatch):
    model = eos_prone_model(6)
    calls = []
    original = VanillaTransformerForConditionalGeneration._paper_beam_search

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(VanillaTransformerForConditionalGeneration, "_paper_beam_search", spy)
    model.generate(**padded(random_sources([4], seed=1)), max_new_tokens=5)
    model.generate(**padded(random_sources([4], seed=1)), max_new_tokens=5, generation_config=GenerationConfig())
    assert calls == [1, 1]  # a GenerationConfig without the entries inherits the model's


# --- the defaults in save/load and remote code --------------------------------------------------------------


def test_paper_defaults_on_a_fresh_model():
    config = tiny_model().generation_config
    for name, value in PAPER_GENERATION_DEFAULTS.items():
        assert getattr(config, name) == value, name
    assert PAPER_GENERATION_DEFAULTS == {
        "num_beams": 4,
        "length_penalty": 0.6,
        "early_stopping": True,
        "length_penalty_form": "gnmt",
        "max_new_tokens_over_input": 50,
    }


def test_paper_defaults_survive_save_and_load(tmp_path):
    model = eos_prone_model(31, scale=2.0)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "generation_config.json").read_text())
    assert {name: saved[name] for name in PAPER_GENERATION_DEFAULTS} == PAPER_GENERATION_DEFAULTS
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    for name, value in PAPER_GENERATION_DEFAULTS.items():
        assert getattr(reloaded.generation_config, name) == value, name
    # a user's own choices survive too, None ("no per-sentence limit") included
    reloaded.generation_config.max_new_tokens_over_input = None
    reloaded.generation_config.length_penalty_form = "hf"
    reloaded.save_pretrained(tmp_path / "changed")
    again = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "changed").generation_config
    assert again.max_new_tokens_over_input is None and again.length_penalty_form == "hf" and again.num_beams == 4
    # a checkpoint without generation_config.json still decodes the paper's way
    (tmp_path / "generation_config.json").unlink()
    bare = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).generation_config
    assert {name: getattr(bare, name) for name in PAPER_GENERATION_DEFAULTS} == PAPER_GENERATION_DEFAULTS


def test_remote_code_decodes_the_papers_way_by_default(tmp_path):
    # the model and source of the test above where the GNMT and HF forms disagree
    model = eos_prone_model(31, scale=2.0)
    model.save_pretrained(tmp_path)
    inputs = {"input_ids": torch.randint(3, VOCAB, (1, 5), generator=torch.Generator().manual_seed(31))}
    expected = model.generate(**inputs, max_new_tokens=12).tolist()
    hf_form = model.generate(**inputs, max_new_tokens=12, length_penalty_form="hf", early_stopping="never").tolist()
    assert generated_tokens(expected[0]) != generated_tokens(hf_form[0])
    assert generate_without_package(tmp_path, inputs, max_new_tokens=12) == expected


# --- every transformers beam-search option: run by the paper's beam search, or handed to transformers ------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sequence_bias": {(5,): -1.0}},
        {"encoder_no_repeat_ngram_size": 2},
        {"logits_processor": LogitsProcessorList([TemperatureLogitsWarper(0.5)])},
        {"stopping_criteria": StoppingCriteriaList([MaxTimeCriteria(10.0)])},
        {"max_time": 5.0},
        {"prefix_allowed_tokens_fn": lambda batch_id, ids: [5, 6, EOS] if batch_id == 0 else [7, EOS]},
    ],
    ids=["sequence-bias", "encoder-no-repeat", "temperature", "max-time-criterion", "max-time", "prefix-fn"],
)
def test_paper_beam_search_applies_every_processor_and_criterion(kwargs, monkeypatch):
    """Processors and criteria that read a row's place in the batch run on the whole batch, in transformers' layout,
    and the result is what transformers' beam search gives when the two length penalties agree (α = 0)."""
    model = eos_prone_model(5)
    inputs = padded(random_sources([5, 3], seed=0))
    calls = []
    original = VanillaTransformerForConditionalGeneration._paper_beam_search
    monkeypatch.setattr(
        VanillaTransformerForConditionalGeneration,
        "_paper_beam_search",
        lambda *args, **kw: calls.append(1) or original(*args, **kw),
    )
    common = {"max_new_tokens": 6, "length_penalty": 0.0, "early_stopping": "never", "num_return_sequences": 2}
    ours = model.generate(**inputs, **common, **kwargs)
    assert calls == [1]
    theirs = model.generate(**inputs, **common, **kwargs, length_penalty_form="hf")
    # transformers pads after EOS with EOS when pad_token_id is 0 (`pad_token_id or eos_token_id`)
    assert [generated_tokens(row) for row in ours.tolist()] == [generated_tokens(row) for row in theirs.tolist()]
    if "prefix_allowed_tokens_fn" in kwargs:
        assert set(ours[2:, 1:].flatten().tolist()) <= {7, EOS, PAD}


@pytest.mark.parametrize(
    ("kwargs", "mode"),
    [
        ({"do_sample": True}, "beam_sample"),
        ({"num_beam_groups": 2, "diversity_penalty": 1.0}, "group_beam_search"),
        ({"force_words_ids": [[7]]}, "constrained_beam_search"),
    ],
)
def test_what_the_paper_beam_search_lacks_runs_in_transformers_with_one_warning(kwargs, mode):
    """Beam sampling, diverse and constrained beams are transformers' (the last two live in Hub repos since v5 and
    need `trust_remote_code`): our model behaves exactly as transformers' `generate` does, after one warning."""
    model = tiny_model()
    inputs = padded(random_sources([4], seed=0))

    def run(generate):
        torch.manual_seed(0)
        try:
            return generate(model, **inputs, max_new_tokens=3, **kwargs)
        except ValueError as error:  # transformers' own refusal (a Hub repo without trust_remote_code)
            return str(error)

    with CaptureLogger(logging.get_logger(GENERATION_MODULE)) as captured:
        ours = run(VanillaTransformerForConditionalGeneration.generate)
    warnings = [line for line in captured.out.splitlines() if "does not implement" in line]
    assert len(warnings) == 1 and mode.replace("_", " ") in warnings[0] and "|Y|^α" in warnings[0]
    theirs = run(GenerationMixin.generate)
    assert ours == theirs if isinstance(ours, str) else torch.equal(ours, theirs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length_penalty_form": "wu"}, r"length_penalty_form='wu' is unknown; use 'gnmt'"),
        ({"max_new_tokens_over_input": -1}, r"max_new_tokens_over_input=-1 must be an integer >= 0"),
        ({"max_new_tokens_over_input": 2.5}, r"max_new_tokens_over_input=2.5 must be an integer >= 0"),
    ],
)
def test_bad_values_of_the_new_entries(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_model().generate(**padded(random_sources([4], seed=0)), **kwargs)


# --- translate --------------------------------------------------------------------------------------------------


def word_level_tokenizer() -> PreTrainedTokenizerFast:
    """Whitespace words w4 … w63 with the project's special ids: <pad>=0, <s>=1, </s>=2, <unk>=3; </s> appended."""
    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS, "<unk>": 3, **{f"w{i}": i for i in range(4, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", EOS)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


SENTENCES = ["w5 w9 w13", "w40", "w7 w8 w9 w10 w11 w12", "", "w20 w21 w22 w23", "w63 w4", "   ", "w30 w31 w32"]


def test_more_beams_than_tokens_are_refused_naming_the_flag():
    model, tokenizer = eos_prone_model(7), word_level_tokenizer()
    expected = f"num_beams={VOCAB + 1} \\(--num-beams\\) is more beams than the model's {VOCAB} tokens"
    with pytest.raises(VanillaTransformerError, match=expected):
        translate(model, tokenizer, ["w5 w9"], num_beams=VOCAB + 1)
    assert len(translate(model, tokenizer, ["w5 w9"], num_beams=VOCAB)) == 1  # as many beams as tokens: allowed


def test_translate_restores_order_and_is_invariant_to_batching(monkeypatch):
    model, tokenizer = eos_prone_model(7), word_level_tokenizer()
    assert tokenizer("w5 w9")["input_ids"] == [5, 9, EOS]
    shapes = []
    generate = model.generate

    def spy(**kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))
        return generate(**kwargs)

    monkeypatch.setattr(model, "generate", spy)
    settings = {"max_new_tokens_over_input": 4}
    by_four = translate(model, tokenizer, SENTENCES, batch_size=4, **settings)
    # longest first, 6 non-empty sentences in batches of 4 and 2: little padding
    assert shapes == [(4, 7), (2, 3)]
    one_by_one = translate(model, tokenizer, SENTENCES, batch_size=1, **settings)
    assert by_four == one_by_one
    assert len(by_four) == len(SENTENCES)
    assert by_four[3] == "" and by_four[6] == ""  # empty lines stay empty and never reach the model
    assert len(shapes) == 2 + 6
    for sentence, translation in zip(SENTENCES, by_four, strict=True):
        if sentence.strip():
            ids = torch.tensor([tokenizer(sentence)["input_ids"]])
            expected = tokenizer.decode(generate(input_ids=ids, **settings)[0], skip_special_tokens=True)
            assert translation == expected
            assert "<s>" not in translation and "</s>" not in translation and "<pad>" not in translation
    assert len(set(by_four) - {""}) > 1  # the outputs differ, so the order check means something


def test_translate_restores_train_mode_and_accepts_generate_kwargs():
    model, tokenizer = eos_prone_model(7).train(), word_level_tokenizer()
    greedy = translate(model, tokenizer, SENTENCES[:3], num_beams=1, max_new_tokens=3)
    assert model.training
    assert all(len(text.split()) <= 3 for text in greedy)
    with pytest.raises(ValueError, match="num_return_sequences=2 is not supported"):
        translate(model, tokenizer, SENTENCES, num_return_sequences=2)
    with pytest.raises(TypeError, match="list of strings"):
        translate(model, tokenizer, "w5 w6")
    assert translate(model, tokenizer, ["", " "]) == ["", ""]


def test_translate_command_writes_one_line_per_input_line(tmp_path):
    model, tokenizer = eos_prone_model(7), word_level_tokenizer()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "source.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    main(
        [
            "translate",
            *("--model", str(tmp_path / "model"), "--input", str(tmp_path / "source.txt")),
            *("--output", str(tmp_path / "out.txt"), "--batch-size", "3", "--num-beams", "2", "--device", "cpu"),
        ]
    )
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and lines[:-1] == translate(model, tokenizer, SENTENCES, num_beams=2)
