"""Odd input at every entry point (generate, translate, evaluate, the data loaders, the tokenizer): empty
and whitespace-only lines, lines longer than max_position_embeddings, mixed scripts and emoji, control characters,
text that spells special tokens, CRLF files with a byte-order mark, and a batch mixing all of these; plus
property-based tests over random token sequences and masks."""

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import EOS, PAD, VOCAB, random_batch, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vanilla_transformer.cli.main import main
from vanilla_transformer.data.corpora import load_text_files
from vanilla_transformer.data.text import read_lines
from vanilla_transformer.data.tokenized import tokenize_pairs
from vanilla_transformer.files.loading import write_checksums
from vanilla_transformer.inference.translation import translate
from vanilla_transformer.model.generation_vanilla_transformer import CACHE_OUTPUT_NAME

ROOT = Path(__file__).resolve().parents[2]
LONG_LINE = "the small dog runs to the big house . " * 12  # ~100 tokens, beyond max_position_embeddings=16
ODD_LINES = [
    "a man rides a bike .",
    "",
    "   \t ",
    LONG_LINE,
    "Ein Mann 😀 fährt 中文 مرحبا Ελληνικά 🇩🇪",
    "nul\x00bell\x07vt\x0bff\x0cfs\x1cnel\x85ls\u2028ps\u2029zwsp\u200bend",
    "</s> <pad> <s> <unk> are text here",
    "a lone \r carriage return",
    "e\u0301 combining and \ufeff a mid-line BOM",
]
PROPERTY_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write_crlf(path: Path, lines: list[str]) -> None:
    path.write_bytes(b"\xef\xbb\xbf" + "".join(line + "\r\n" for line in lines).encode("utf-8"))


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, builtin_tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("odd") / "model"
    tiny_model(vocab_size=len(builtin_tokenizer), max_position_embeddings=16).save_pretrained(folder)
    builtin_tokenizer.save_pretrained(folder)
    write_checksums(folder)
    return folder


# --- the data loaders and the tokenizer -------------------------------------------------------------------------


def test_read_lines_splits_at_newlines_only(tmp_path):
    write_crlf(tmp_path / "crlf.en", ODD_LINES)
    (tmp_path / "lf.en").write_text("".join(line + "\n" for line in ODD_LINES), encoding="utf-8", newline="\n")
    assert read_lines(tmp_path / "crlf.en") == read_lines(tmp_path / "lf.en") == ODD_LINES
    # a CRLF source beside an LF target stays aligned, line by line
    (tmp_path / "crlf.de").write_text("".join(f"{i}\n" for i in range(len(ODD_LINES))), encoding="utf-8")
    pairs = load_text_files(tmp_path, "crlf", "en", "de")["translation"]
    assert [p["en"] for p in pairs] == ODD_LINES and [p["de"] for p in pairs] == [str(i) for i in range(9)]


def test_tokenize_pairs_counts_what_it_drops_and_keeps_special_token_text(tmp_path, builtin_tokenizer):
    (tmp_path / "odd.en").write_text("".join(line.replace("\r", " ") + "\n" for line in ODD_LINES), encoding="utf-8")
    (tmp_path / "odd.de").write_text("".join("ein Satz .\n" for _ in ODD_LINES), encoding="utf-8")
    corpus = load_text_files(tmp_path, "odd", "en", "de")
    dataset, report = tokenize_pairs(corpus, builtin_tokenizer, "en", "de", max_length=64)
    assert report.empty == [1, 2] and report.too_long == [3]  # empty and whitespace-only; the long line
    assert report.kept == len(ODD_LINES) - 3 == len(dataset)
    special = dataset["input_ids"][ODD_LINES.index("</s> <pad> <s> <unk> are text here") - 3]
    assert special[-1] == EOS and EOS not in special[:-1] and PAD not in special


# text with the special tokens' spellings, line breaks and emoji mixed into arbitrary Unicode
ODD_TEXT = st.lists(
    st.one_of(st.text(max_size=20), st.sampled_from(["</s>", "<pad>", "<s>", "<unk>", "\r\n", "\x00", "😀", " "])),
    max_size=8,
).map("".join)


@PROPERTY_SETTINGS
@given(text=ODD_TEXT)
def test_tokenizer_round_trips_any_text(builtin_tokenizer, text):
    ids = builtin_tokenizer(text)["input_ids"]
    assert ids[-1] == EOS and EOS not in ids[:-1]  # exactly one </s>, at the end: typed "</s>" is text
    assert all(0 <= i < len(builtin_tokenizer) for i in ids)
    assert builtin_tokenizer.decode(ids, skip_special_tokens=True) == text


# --- translate and the two command lines -----------------------------------------------------------------------


def test_a_batch_of_odd_lines_translates_aligned_and_untruncated(model_folder, builtin_tokenizer, monkeypatch):
    from vanilla_transformer.files.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(model_folder)
    widths = []
    generate = model.generate

    def spy(**kwargs):
        widths.append(kwargs["input_ids"].shape[1])
        return generate(**kwargs)

    monkeypatch.setattr(model, "generate", spy)
    batched = translate(model, tokenizer, ODD_LINES, batch_size=4, num_beams=2)
    long_tokens = len(tokenizer(LONG_LINE)["input_ids"])
    assert long_tokens > model.config.max_position_embeddings and widths[0] == long_tokens  # nothing cut
    alone = [translate(model, tokenizer, [line], num_beams=2)[0] for line in ODD_LINES]
    assert batched == alone  # the mixture in one batch changes no sentence
    assert len(batched) == len(ODD_LINES) and batched[1] == batched[2] == ""
    assert len(set(batched)) > 2


def test_the_long_line_gets_its_input_plus_50_tokens(model_folder):
    from vanilla_transformer.files.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(model_folder)
    source = tokenizer([LONG_LINE], return_tensors="pt")
    out = model.generate(**source, num_beams=2, min_new_tokens=source["input_ids"].shape[1] + 50)
    assert out.shape[1] == 1 + source["input_ids"].shape[1] + 50  # decoder start + input + 50, past the table


def test_translate_command_on_a_crlf_file_with_odd_lines(model_folder, tmp_path):
    write_crlf(tmp_path / "crlf.en", ODD_LINES)
    main(["translate", "--model", str(model_folder), "--input", str(tmp_path / "crlf.en"), "--output",
          str(tmp_path / "out.de"), "--num-beams", "2", "--device", "cpu"])  # fmt: skip
    written = (tmp_path / "out.de").read_bytes().decode("utf-8")
    assert written.count("\n") == len(ODD_LINES) and "\r" not in written
    assert read_lines(tmp_path / "out.de")[1:3] == ["", ""]


def test_evaluate_command_scores_crlf_files_like_lf_files(tmp_path, monkeypatch, capsys):
    hypotheses = ["Ein Mann fährt Rad .", "", "😀 中文", "nul\x00 ls\u2028 end"]
    references = ["Ein Mann fährt ein Rad .", "leer", "😀 中文 Text", "nul\x00 ls\u2028 end"]
    write_crlf(tmp_path / "hyp.crlf", hypotheses)
    (tmp_path / "hyp.lf").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    (tmp_path / "ref.de").write_text("".join(r + "\n" for r in references), encoding="utf-8")
    scores = []
    for name in ("hyp.crlf", "hyp.lf"):
        main(["evaluate", "--hypotheses", str(tmp_path / name), "--references", str(tmp_path / "ref.de")])
        result = json.loads(capsys.readouterr().out)
        assert result["num_sentences"] == 4
        scores.append((result["bleu"]["score"], result["chrf"]["score"]))
    assert scores[0] == scores[1] and 0 < scores[0][0] < 100


def test_learned_positions_refuse_long_lines_naming_the_limit(builtin_tokenizer):
    model = tiny_model(vocab_size=len(builtin_tokenizer), position_encoding="learned", max_position_embeddings=16)
    with pytest.raises(ValueError, match=r"sentence 3 \(0-based\) has \d+ tokens .* max_position_embeddings=16"):
        translate(model, builtin_tokenizer, ODD_LINES, num_beams=1)


def test_generate_names_an_empty_source():
    with pytest.raises(ValueError, match=r"The source is empty \(shape \(2, 0\)\)"):
        tiny_model().generate(input_ids=torch.zeros((2, 0), dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.bool, torch.uint8, torch.int16])
@pytest.mark.parametrize("argument", ["input_ids", "decoder_input_ids", "labels"])
def test_token_ids_of_another_dtype_are_refused_naming_the_argument_the_dtype_and_the_fix(argument, dtype):
    """Ids as floats (a tensor built from a list of floats, a cast on the way) or as an integer type that embedding
    lookups do not take: one ValueError, not the raw error of F.embedding or a loss reading floats as probabilities."""
    batch = random_batch() | {"labels": random_batch(seed=1)["decoder_input_ids"]}
    batch[argument] = batch[argument].to(dtype)
    vectors = {"input_ids": " (or pass vectors as inputs_embeds)", "decoder_input_ids": " (or pass vectors as "}
    expected = (
        f"{argument} must hold integer token ids (torch.long or torch.int), got dtype {dtype}; convert them with "
        f"{argument}.long(){vectors.get(argument, '.')}"
    )
    with pytest.raises(ValueError) as error:
        tiny_model()(**batch)
    assert str(error.value).startswith(expected)
    if argument == "input_ids":  # generate reaches the same check
        with pytest.raises(ValueError, match=re.escape(expected)):
            tiny_model().generate(input_ids=batch["input_ids"], max_new_tokens=2)


def test_int32_ids_are_taken_as_they_are():
    model, batch = tiny_model(), random_batch()
    labels = random_batch(seed=1)["decoder_input_ids"]
    expected = model(**batch, labels=labels)
    as_int32 = model(**{key: value.int() for key, value in batch.items()}, labels=labels.int())
    assert torch.equal(as_int32.logits, expected.logits) and torch.equal(as_int32.loss, expected.loss)


# --- properties of the model over random token sequences and masks ---------------------------------------------

MODEL = {}


def property_model(attn_implementation: str):
    if attn_implementation not in MODEL:
        MODEL[attn_implementation] = tiny_model(max_position_embeddings=8)
        MODEL[attn_implementation].set_attn_implementation(attn_implementation)
    return MODEL[attn_implementation]


@st.composite
def padded_batches(draw):
    """Right-padded source and target batches of random ids; a source row may be all padding (an empty line)."""
    batch_size = draw(st.integers(1, 4))
    source_lengths = draw(st.lists(st.integers(0, 12), min_size=batch_size, max_size=batch_size))
    target_lengths = draw(st.lists(st.integers(1, 12), min_size=batch_size, max_size=batch_size))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    source_width, target_width = max(max(source_lengths), 1), max(target_lengths)
    input_ids = torch.randint(3, VOCAB, (batch_size, source_width), generator=generator)
    decoder_input_ids = torch.randint(3, VOCAB, (batch_size, target_width), generator=generator)
    attention_mask = (torch.arange(source_width) < torch.tensor(source_lengths)[:, None]).long()
    decoder_attention_mask = (torch.arange(target_width) < torch.tensor(target_lengths)[:, None]).long()
    return (
        {
            "input_ids": input_ids.masked_fill(attention_mask == 0, PAD),
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids.masked_fill(decoder_attention_mask == 0, PAD),
            "decoder_attention_mask": decoder_attention_mask,
        },
        source_lengths,
        target_lengths,
    )


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@PROPERTY_SETTINGS
@given(drawn=padded_batches())
def test_logits_are_finite_and_padding_invariant(attn_implementation, drawn):
    batch, source_lengths, target_lengths = drawn
    model = property_model(attn_implementation)
    with torch.no_grad():
        logits = model(**batch).logits
        assert torch.isfinite(logits).all()
        for row, (source_length, target_length) in enumerate(zip(source_lengths, target_lengths, strict=True)):
            if source_length == 0:
                continue  # an empty source has no unpadded form; finite is all it owes
            alone = model(
                input_ids=batch["input_ids"][row : row + 1, :source_length],
                decoder_input_ids=batch["decoder_input_ids"][row : row + 1, :target_length],
            ).logits
            torch.testing.assert_close(logits[row : row + 1, :target_length], alone, rtol=0, atol=1e-5)


@PROPERTY_SETTINGS
@given(drawn=padded_batches())
def test_translation_with_the_cache_matches_the_full_forward(drawn):
    batch, _, _ = drawn
    model = property_model("sdpa")
    decoder_input_ids = batch["decoder_input_ids"].clamp(min=3)  # the cache path is for unpadded prompts
    with torch.no_grad():
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     decoder_input_ids=decoder_input_ids).logits  # fmt: skip
        encoder_outputs = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        cache, steps = None, []
        for position in range(decoder_input_ids.shape[1]):
            out = model(encoder_outputs=encoder_outputs, attention_mask=batch["attention_mask"],
                        decoder_input_ids=decoder_input_ids[:, position : position + 1], **{CACHE_OUTPUT_NAME: cache},
                        use_cache=True)  # fmt: skip
            cache = getattr(out, CACHE_OUTPUT_NAME)
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
    assert torch.isfinite(full).all()
