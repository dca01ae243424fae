"""The CTranslate2 export: every configuration the model supports decodes as ours does (greedy tokens equal,
per-token log-probabilities within 1e-4), int8 keeps the release's BLEU, and what cannot be exported or decoded is
refused by name."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model

from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.errors import ExportError, ModelFolderError
from vanilla_transformer.inference.ctranslate2_engine import export_ctranslate2, load_ctranslate2
from vanilla_transformer.inference.scoring import score_translations
from vanilla_transformer.inference.translation import load_translator

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "model_cards" / "vanilla-transformer-multi30k-en-de"
MAX_NEW_TOKENS = 20
SOURCES = [
    "A man is riding a bike.",
    "Two dogs play in the snow near a red house while a child watches them from the window.",
    "Hello",
    "A woman in a blue dress sings on a stage.",
    "Children are playing soccer in a park.",
]

CONFIGURATIONS = {
    "paper (post-LN, interleaved sinusoid, shared, tied, no biases)": {},
    "pre-LN": {"normalize_before": True},
    "sinusoidal halves": {"position_encoding": "sinusoidal_halves"},
    "learned positions": {"position_encoding": "learned"},
    "separate vocabularies": {"share_encoder_decoder_embeddings": False, "padded_source_rows": 8},
    "attention biases": {"attention_bias": True},
    "untied output projection": {"tie_word_embeddings": False},
    "gelu, no embedding scale, eps 1e-5": {
        "activation_function": "gelu",
        "scale_embedding": False,
        "layer_norm_eps": 1e-5,
    },
    "unequal stacks": {"decoder_layers": 3, "decoder_attention_heads": 2},
}


def peaked_model(tokenizer, **overrides):
    """A tiny model whose random weights give peaked distributions (greedy choices are no near-ties), with random
    LayerNorm gains and biases (a swapped or missing one would show) and a longer </s> row, so that some outputs
    end before the length limit and some reach it."""
    padded = overrides.pop("padded_source_rows", 0)
    model = tiny_model(
        vocab_size=len(tokenizer) + padded,
        decoder_vocab_size=len(tokenizer),
        max_position_embeddings=64,
        init_std=0.5,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        **overrides,
    )
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                parameter.copy_(1 + 0.3 * torch.randn(parameter.shape, generator=generator))
            elif name.endswith("bias"):
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    # lengthen the </s> row until some outputs end with </s> and some at the length limit
    eos_row = model.get_output_embeddings().weight[tokenizer.eos_token_id]
    original = eos_row.detach().clone()
    for factor in (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0):
        with torch.no_grad():
            eos_row.copy_(factor * original)
        lengths = [len(h) for h in ours(model, tokenizer)[0]]
        if min(lengths) < MAX_NEW_TOKENS == max(lengths):
            return model
    raise AssertionError(f"no </s> scale gives both stops: lengths {lengths}")


def ours(model, tokenizer) -> tuple[list[list[int]], list[list[float]]]:
    """Our greedy outputs (without the start token, up to and with </s>) and each token's log-probability."""
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        output = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    hypotheses, log_probs = [], []
    for row, sequence in enumerate(output.tolist()):
        hypothesis = sequence[1:]
        if model.config.eos_token_id in hypothesis:
            hypothesis = hypothesis[: hypothesis.index(model.config.eos_token_id) + 1]
        source = batch["input_ids"][row][batch["attention_mask"][row].bool()][None]
        decoder_input_ids = torch.tensor([[model.config.decoder_start_token_id, *hypothesis[:-1]]])
        with torch.no_grad():
            logits = model(input_ids=source, decoder_input_ids=decoder_input_ids).logits[0]
        log_probs.append(F.log_softmax(logits, -1).gather(-1, torch.tensor(hypothesis)[:, None])[:, 0].tolist())
        hypotheses.append(hypothesis)
    return hypotheses, log_probs


@pytest.mark.parametrize("overrides", CONFIGURATIONS.values(), ids=CONFIGURATIONS.keys())
def test_the_float32_export_decodes_as_ours(overrides, builtin_tokenizer, tmp_path):
    model = peaked_model(builtin_tokenizer, **overrides)
    model.save_pretrained(tmp_path / "model")
    builtin_tokenizer.save_pretrained(tmp_path / "model")
    expected, expected_log_probs = ours(model, builtin_tokenizer)
    assert any(h[-1] == builtin_tokenizer.eos_token_id for h in expected)  # some end with </s> ...
    assert any(h[-1] != builtin_tokenizer.eos_token_id for h in expected)  # ... and some at the length limit

    export_ctranslate2(tmp_path / "model", tmp_path / "export")
    translator, tokenizer, _ = load_ctranslate2(tmp_path / "export", threads=1)
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(s)["input_ids"]) for s in SOURCES]
    results = translator.translate_batch(
        sources, beam_size=1, max_decoding_length=MAX_NEW_TOKENS, min_decoding_length=0, return_end_token=True
    )
    assert [tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results] == expected

    # score_batch adds the start token and </s> itself; a hypothesis cut at the limit gets one </s> more
    eos = builtin_tokenizer.eos_token_id
    targets = [tokenizer.convert_ids_to_tokens([t for t in h if t != eos]) for h in expected]
    for score, log_probs in zip(translator.score_batch(sources, targets), expected_log_probs, strict=True):
        assert len(score.log_probs) >= len(log_probs)
        torch.testing.assert_close(torch.tensor(score.log_probs[: len(log_probs)]), torch.tensor(log_probs),
                                   rtol=0, atol=1e-4)  # fmt: skip


@pytest.mark.slow
def test_an_int8_export_of_the_release_keeps_its_bleu_and_float32_keeps_its_translations(tmp_path):
    test = load_builtin("test")["translation"]
    sources, references = [p["en"] for p in test], [p["de"] for p in test]
    export_ctranslate2(RELEASE, tmp_path / "float32")
    export_ctranslate2(RELEASE, tmp_path / "int8", quantization="int8")
    float32 = load_translator(str(tmp_path / "float32"), "ctranslate2", "cpu").translate(sources)
    int8 = load_translator(str(tmp_path / "int8"), "ctranslate2", "cpu").translate(sources)
    bleu_float32 = score_translations(float32, references)["bleu"]["score"]
    bleu_int8 = score_translations(int8, references)["bleu"]["score"]
    assert abs(bleu_int8 - bleu_float32) <= 1.0, (bleu_float32, bleu_int8)
    # the paper's beam search (beam 4, GNMT penalty on the n-best, input + 50): as ours, sentence for sentence
    pytorch = load_translator(str(RELEASE), "pytorch", "cpu").translate(sources[:100])
    same = sum(a == b for a, b in zip(pytorch, float32[:100], strict=True))
    assert same >= 95, same


def test_the_export_holds_its_tokenizer_vocabulary_and_what_it_was_made_from(builtin_tokenizer, tmp_path):
    model = peaked_model(builtin_tokenizer, position_encoding="learned")
    model.save_pretrained(tmp_path / "model")
    builtin_tokenizer.save_pretrained(tmp_path / "model")
    export_ctranslate2(tmp_path / "model", tmp_path / "export", quantization="int8")
    info = json.loads((tmp_path / "export" / "export_info.json").read_text())
    assert info["quantization"] == "int8" and info["max_positions"] == 64  # a learned table ends where it ends
    assert info["decoding"] == {
        "num_beams": 4,
        "length_penalty": 0.6,
        "length_penalty_form": "gnmt",
        "max_new_tokens_over_input": 50,
    }
    vocabulary = json.loads((tmp_path / "export" / "shared_vocabulary.json").read_text())
    assert vocabulary == builtin_tokenizer.convert_ids_to_tokens(list(range(len(builtin_tokenizer))))
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert (config["decoder_start_token"], config["eos_token"]) == ("<s>", "</s>")
    assert config["layer_norm_epsilon"] == model.config.layer_norm_eps
    assert "translate --engine ctranslate2" in (tmp_path / "export" / "README.md").read_text()


def test_what_cannot_be_exported_or_decoded_is_named(builtin_tokenizer, tmp_path):
    model = peaked_model(builtin_tokenizer)
    model.save_pretrained(tmp_path / "no-tokenizer")
    with pytest.raises(ModelFolderError, match="tokenizer"):
        export_ctranslate2(tmp_path / "no-tokenizer", tmp_path / "export")
    (tmp_path / "not-ours").mkdir()
    (tmp_path / "not-ours" / "config.json").write_text(json.dumps({"model_type": "marian"}))
    with pytest.raises(ModelFolderError, match="model_type"):
        export_ctranslate2(tmp_path / "not-ours", tmp_path / "export")
    builtin_tokenizer.save_pretrained(tmp_path / "model")
    model.save_pretrained(tmp_path / "model")
    with pytest.raises(ExportError, match="quantization='int4' is not one of CTranslate2's"):
        export_ctranslate2(tmp_path / "model", tmp_path / "export", quantization="int4")
    assert not (tmp_path / "export").exists()  # nothing half-written
    peaked_model(builtin_tokenizer, qk_head_dim=3).save_pretrained(tmp_path / "small-d_k")  # Table 3, row (B)
    builtin_tokenizer.save_pretrained(tmp_path / "small-d_k")
    with pytest.raises(
        ExportError, match=r"d_k=3 and d_v=\d+ \(qk_head_dim, v_head_dim\) .* translate it with PyTorch"
    ):
        export_ctranslate2(tmp_path / "small-d_k", tmp_path / "export")
    assert not (tmp_path / "export").exists()

    export_ctranslate2(tmp_path / "model", tmp_path / "export", max_positions=8)
    translator = load_translator(str(tmp_path / "export"), "ctranslate2", "cpu")
    with pytest.raises(ExportError, match="sentence 2 has .* tokens, more than the 8 positions .* --max-positions"):
        translator.translate(["Hello", "Two dogs play in the snow near a red house."])
    with pytest.raises(ModelFolderError, match="not a CTranslate2 export of ours .* export-ctranslate2"):
        load_translator(str(tmp_path / "model"), "ctranslate2", "cpu")
    with pytest.raises(ExportError, match="CTranslate2 runs on cpu or cuda"):
        load_translator(str(tmp_path / "export"), "ctranslate2", "mps")


@pytest.mark.slow
def test_the_commands_export_and_translate(builtin_tokenizer, tmp_path):
    peaked_model(builtin_tokenizer).save_pretrained(tmp_path / "model")
    builtin_tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "input.en").write_text("A man is riding a bike.\n\nHello\n")

    def command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)

    done = command("-m", "vanilla_transformer", "export-ctranslate2", "model", "export", "--quantization", "int8")
    assert done.returncode == 0 and "exported model (int8) to export" in done.stdout, done.stderr
    done = command("-m", "vanilla_transformer", "translate", "--engine", "ctranslate2", "--model", "export",
                   "--input", "input.en", "--output", "output.de")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "output.de").read_text().split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # line for line, the empty line kept empty
    done = command("-m", "vanilla_transformer", "export-ctranslate2", "model", "model", "--quantization", "int4")
    assert done.returncode == 2 and "invalid choice: 'int4'" in done.stderr
    done = command("-m", "vanilla_transformer", "export-ctranslate2", "model", "input.en")
    assert done.returncode == 2 and "input.en" in done.stderr
    assert (tmp_path / "input.en").read_text() == "A man is riding a bike.\n\nHello\n"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep")
    done = command("-m", "vanilla_transformer", "export-ctranslate2", "model", "notes")
    assert done.returncode == 2 and "OUTPUT_DIR notes is a non-empty folder" in done.stderr
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["todo.txt"]
