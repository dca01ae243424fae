"""Tests of `vanilla_transformer.inference.evaluation` and `vanilla-transformer evaluate`."""

import json
import os
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import EvalPrediction, PreTrainedTokenizerFast

from vanilla_transformer.data.text import read_lines
from vanilla_transformer.inference.evaluation import evaluate_model_on_split
from vanilla_transformer.inference.scoring import (
    bleu_score,
    chrf_score,
    compute_metrics_for_trainer,
    moses_tokenize,
    score_files,
    score_translations,
)

REPO = Path(__file__).resolve().parents[2]

HYPOTHESES = ["Ein Mann fährt Fahrrad auf der Straße.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch."]
REFERENCES = [
    "Ein Mann fährt auf einer Straße Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau liest eine Zeitung.",
]

# The example in the docstring of the Hub's evaluate-metric/chrf (one reference each), whose outputs it documents.
HUB_CHRF_PREDICTIONS = [
    "The relationship between cats and dogs is not exactly friendly.",
    "a good bookshop is just a genteel black hole that knows how to read.",
]
HUB_CHRF_REFERENCES = [
    "The relationship between dogs and cats is not exactly friendly.",
    "A good bookshop is just a genteel Black Hole that knows how to read.",
]


def offline_environment(tmp_path: Path) -> dict[str, str]:
    """Hub offline, every proxy dead (so any HTTP request fails), and fresh caches: what a machine without network
    that has never loaded a metric looks like."""
    environment = {key: value for key, value in os.environ.items() if "proxy" not in key.lower()}
    dead_proxy = "http://127.0.0.1:9"
    environment.update(
        HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"), HTTP_PROXY=dead_proxy, HTTPS_PROXY=dead_proxy
    )
    return environment


def test_identical_hypotheses_score_100():
    scores = score_translations(REFERENCES, REFERENCES)
    assert scores["bleu"]["score"] == pytest.approx(100.0)
    assert scores["chrf"]["score"] == pytest.approx(100.0)
    assert scores["num_sentences"] == 3


def test_lowercase_scores_ignore_case_and_say_so_in_the_signature():
    shouted = [line.translate(str.maketrans(string.ascii_lowercase, string.ascii_uppercase)) for line in REFERENCES]
    cased = score_translations(shouted, REFERENCES)
    lowercased = score_translations(shouted, REFERENCES, lowercase=True)
    assert cased["bleu"]["score"] < 50 and lowercased["bleu"]["score"] == pytest.approx(100.0)
    assert lowercased["chrf"]["score"] == pytest.approx(100.0) and cased["chrf"]["score"] < 90
    assert "case:lc" in lowercased["bleu"]["signature"] and "case:mixed" in cased["bleu"]["signature"]


def test_bleu_and_chrf_are_sacrebleus():
    scores = score_translations(HYPOTHESES, REFERENCES)
    expected_bleu = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    assert scores["bleu"]["score"] == pytest.approx(expected_bleu.score, abs=1e-12)
    assert scores["bleu"]["counts"] == expected_bleu.counts == [17, 9, 6, 3]
    assert scores["bleu"]["totals"] == expected_bleu.totals == [20, 17, 14, 11]
    assert (scores["bleu"]["sys_len"], scores["bleu"]["ref_len"], scores["bleu"]["bp"]) == (20, 20, 1.0)
    assert scores["bleu"]["score"] == pytest.approx(47.89, abs=0.005)
    assert scores["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score, abs=1e-12)
    assert scores["chrf"]["score"] == pytest.approx(75.114, abs=0.0005)
    version = sacrebleu.__version__
    assert scores["bleu"]["signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}"
    assert scores["chrf"]["signature"] == f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{version}"
    assert "tokenized_bleu" not in scores


def test_scores_have_the_keys_and_values_of_the_hub_metrics():
    """bleu_score and chrf_score return what evaluate's Hub modules evaluate-metric/sacrebleu and evaluate-metric/chrf
    return (their documented examples), plus the signature."""
    bleu = bleu_score(HYPOTHESES, REFERENCES)
    assert set(bleu) == {"score", "counts", "totals", "precisions", "bp", "sys_len", "ref_len", "signature"}
    chrf = chrf_score(HUB_CHRF_PREDICTIONS, HUB_CHRF_REFERENCES)
    assert set(chrf) == {"score", "char_order", "word_order", "beta", "signature"}
    assert chrf["score"] == pytest.approx(84.64214891738334, abs=1e-9)
    chrf_plus_plus = chrf_score(HUB_CHRF_PREDICTIONS, HUB_CHRF_REFERENCES, word_order=2)
    assert chrf_plus_plus["score"] == pytest.approx(82.87263732906315, abs=1e-9)
    assert (chrf_plus_plus["char_order"], chrf_plus_plus["word_order"], chrf_plus_plus["beta"]) == (6, 2, 2)
    assert "|nc:6|nw:2|" in chrf_plus_plus["signature"]
    assert "|tok:none|" in bleu_score(HYPOTHESES, REFERENCES, tokenize="none")["signature"]


@pytest.mark.parametrize(
    ("raw", "lang", "tokenized"),
    [
        # Lowercased, punctuation split off, apostrophes and quotes escaped as Moses does by default.
        (
            "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
            "de",
            "ein mann mit einem orangefarbenen hut , der etwas anstarrt .",
        ),
        ('A man\'s "big" hat & coat.', "en", "a man &apos;s &quot; big &quot; hat &amp; coat ."),
        # Hyphenated words stay whole: no -a (aggressive dash splitting) in task1-tokenize.sh.
        (
            "Ein Boston Terrier läuft über saftig-grünes Gras.",
            "de",
            "ein boston terrier läuft über saftig-grünes gras .",
        ),
        # German normalize-punctuation moves a closing quote before the final period, also at the end of a line.
        ("Auf dem Schild steht: „Fabrik.“", "de", "auf dem schild steht : &quot; fabrik &quot; ."),
        # normalize-punctuation.perl maps ’ to " (sacremoses' perl_parity).
        ("Das „Hook ’em Horns“-Zeichen.", "de", "das &quot; hook &quot; em horns &quot; -zeichen ."),
    ],
)
def test_moses_tokenize_rules(raw, lang, tokenized):
    assert moses_tokenize([raw], lang) == [tokenized]


@pytest.mark.parametrize("lang", ["de", "en"])
@pytest.mark.parametrize("split", ["test2016", "test2017", "valid"])
def test_moses_tokenize_reproduces_the_official_multi30k_tok_files(multi30k, split, lang):
    raw = read_lines(multi30k / f"{split}.{lang}")
    official = read_lines(multi30k / "tok" / f"{split}.lc.norm.tok.{lang}")
    ours = moses_tokenize(raw, lang)
    differences = [
        (number, raw[number], ours[number], official[number])
        for number in range(len(raw))
        if ours[number] != official[number]
    ]
    assert len(raw) == len(official) > 999
    assert differences == []


def test_tokenized_bleu_of_the_raw_reference_against_the_official_tok_reference_is_100(multi30k):
    raw = read_lines(multi30k / "test2016.de")
    official = read_lines(multi30k / "tok" / "test2016.lc.norm.tok.de")
    tokenized_bleu = score_translations(raw, raw, official, lang="de")["tokenized_bleu"]
    assert tokenized_bleu["score"] == pytest.approx(100.0)
    assert tokenized_bleu["counts"] == tokenized_bleu["totals"] == [12103, 11103, 10103, 9103]
    assert tokenized_bleu["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:none|smooth:none|")
    assert "normalize-punctuation -l de" in tokenized_bleu["preprocessing"]


def test_tokenized_bleu_is_multi_bleu_on_lowercased_moses_tokens():
    hypotheses = [line.lower() for line in HYPOTHESES]
    tokenized_references = moses_tokenize(REFERENCES, "de")
    scores = score_translations(hypotheses, REFERENCES, tokenized_references, lang="de")
    expected = sacrebleu.corpus_bleu(
        moses_tokenize(hypotheses, "de"), [tokenized_references], tokenize="none", smooth_method="none", force=True
    )
    assert scores["tokenized_bleu"]["score"] == expected.score
    # Case-insensitive: the lowercased hypotheses score as the cased ones do, unlike sacreBLEU on the raw references.
    assert scores["tokenized_bleu"]["score"] == pytest.approx(
        score_translations(HYPOTHESES, REFERENCES)["bleu"]["score"]
    )
    assert scores["bleu"]["score"] < scores["tokenized_bleu"]["score"] - 5


def test_mismatched_or_empty_inputs_raise_naming_the_counts():
    with pytest.raises(ValueError, match="3 hypotheses but 2 references"):
        score_translations(HYPOTHESES, REFERENCES[:2])
    with pytest.raises(ValueError, match="3 hypotheses but 4 tokenized references"):
        score_translations(HYPOTHESES, REFERENCES, REFERENCES + ["x"])
    with pytest.raises(ValueError, match="no hypotheses"):
        score_translations([], [])


def word_level_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {word: 4 + index for index, word in enumerate(words)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def test_compute_metrics_for_trainer_decodes_ids_and_ignores_minus_100():
    tokenizer = word_level_tokenizer(["ein", "hund", "läuft", "schläft", "im", "schnee", "."])
    ids = tokenizer.convert_tokens_to_ids
    # Generated ids start with the decoder start token <s>; the Trainer pads batches of different widths with -100.
    predictions = np.array(
        [
            [1, *ids(["ein", "hund", "läuft", "im", "schnee", "."]), 2, 0],
            [1, *ids(["ein", "hund", "läuft", "."]), 2, -100, -100, -100],
        ]
    )
    labels = np.array(
        [
            [*ids(["ein", "hund", "läuft", "im", "schnee", "."]), 2],
            [*ids(["ein", "hund", "schläft", "."]), 2, -100, -100],
        ]
    )
    compute_metrics = compute_metrics_for_trainer(tokenizer)
    metrics = compute_metrics(EvalPrediction(predictions=predictions, label_ids=labels))

    hypotheses = ["ein hund läuft im schnee .", "ein hund läuft ."]
    references = ["ein hund läuft im schnee .", "ein hund schläft ."]
    assert set(metrics) == {"bleu", "chrf", "gen_len"}
    assert metrics["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=1e-12)
    assert metrics["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score, abs=1e-12)
    assert 0 < metrics["bleu"] < 100
    assert metrics["gen_len"] == (8 + 6) / 2  # non-pad tokens, <s> and </s> included
    # A model that returns more than the ids hands the Trainer a tuple.
    assert compute_metrics(EvalPrediction(predictions=(predictions,), label_ids=labels)) == metrics


@pytest.mark.slow
def test_script_scores_a_hypotheses_file(multi30k, tmp_path):
    references = read_lines(multi30k / "test2016.de")[:40]
    tokenized_references = read_lines(multi30k / "tok" / "test2016.lc.norm.tok.de")[:40]
    hypotheses = [line.replace("Mann", "Herr").replace("einem", "einen") for line in references]
    files = {}
    for name, lines in [("hyp", hypotheses), ("ref", references), ("tok", tokenized_references)]:
        files[name] = tmp_path / f"{name}.de"
        files[name].write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    command = [sys.executable, "-m", "vanilla_transformer", "evaluate", "--hypotheses", str(files["hyp"])]
    command += ["--references", str(files["ref"]), "--tokenized-references", str(files["tok"]), "--lang", "de"]

    completed = subprocess.run(
        command, cwd=REPO, env=offline_environment(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    printed = json.loads(completed.stdout)
    expected = score_translations(hypotheses, references, tokenized_references, lang="de")
    assert printed["bleu"] == expected["bleu"]
    assert printed["chrf"] == expected["chrf"]
    assert printed["tokenized_bleu"] == expected["tokenized_bleu"]
    assert 0 < printed["bleu"]["score"] < 100 and 0 < printed["tokenized_bleu"]["score"] < 100
    assert printed["num_sentences"] == 40 and printed["hypotheses"] == str(files["hyp"])

    files["hyp"].write_text("".join(f"{line}\n" for line in hypotheses[:39]), encoding="utf-8")
    with pytest.raises(ValueError, match="39 hypotheses but 40 references"):
        score_files(files["hyp"], files["ref"], files["tok"])


# near-misses in languages written without spaces (the sentences of issue 29, and Japanese and Korean ones): to
# sacreBLEU's default 13a tokenizer each sentence is one token, so BLEU is 0 however close the translation
NEAR_MISSES = {
    "zh": (
        ["我今天在公园看到了一只大狗。", "他们明天上午去北京开会。"],
        ["我今天在公园里看到了一只很大的狗。", "他们明天早上要去北京开会。"],
        "tok:zh",
    ),
    "ja": (["私は昨日公園で大きな犬を見ました。"], ["私は昨日、公園でとても大きな犬を見ました。"], "tok:ja-mecab"),
    "ko": (["나는 어제 공원에서 큰 개를 보았다."], ["나는 어제 공원에서 아주 큰 개를 봤다."], "tok:ko-mecab"),
}


@pytest.mark.parametrize("lang", NEAR_MISSES)
def test_scores_use_the_tokenizer_of_the_target_language(lang):
    hypotheses, references, tokenizer = NEAR_MISSES[lang]
    scores = score_translations(hypotheses, references, lang=lang)
    assert tokenizer in scores["bleu"]["signature"]
    assert scores["bleu"]["score"] > 40 and scores["chrf"]["score"] > 40
    forced = score_translations(hypotheses, references, lang=lang, bleu_tokenize="13a")
    assert "tok:13a" in forced["bleu"]["signature"] and forced["bleu"]["score"] < scores["bleu"]["score"]
    if lang != "ko":  # Korean writes spaces between words: 13a is poor there, not blind
        assert forced["bleu"]["score"] == 0.0
    # German keeps the 13a tokenizer of every score this project has published
    assert "tok:13a" in score_translations(["Ein Hund."], ["Ein Hund."], lang="de")["bleu"]["signature"]


def test_the_trainers_metric_and_the_files_score_chinese_with_the_zh_tokenizer(builtin_tokenizer, tmp_path):
    hypotheses, references, _ = NEAR_MISSES["zh"]
    encode = lambda texts: builtin_tokenizer(texts, padding=True, return_tensors="np")["input_ids"]  # noqa: E731
    prediction = EvalPrediction(predictions=encode(hypotheses), label_ids=encode(references))
    assert compute_metrics_for_trainer(builtin_tokenizer, "zh")(prediction)["bleu"] > 40
    assert compute_metrics_for_trainer(builtin_tokenizer, "de")(prediction)["bleu"] == 0.0

    (tmp_path / "hyp.zh").write_text("\n".join(hypotheses) + "\n")
    (tmp_path / "ref.zh").write_text("\n".join(references) + "\n")
    zh = score_files(tmp_path / "hyp.zh", tmp_path / "ref.zh", lang="zh")
    assert "tok:zh" in zh["bleu"]["signature"]
    with pytest.raises(ValueError, match="bleu_tokenize='words' is not a sacreBLEU tokenizer; use one of"):
        score_files(tmp_path / "hyp.zh", tmp_path / "ref.zh", lang="zh", bleu_tokenize="words")


def test_a_split_of_an_anki_file_is_translated_and_scored_in_its_target_language(builtin_tokenizer, tmp_path):
    from conftest import tiny_model

    from vanilla_transformer.errors import OutputError

    model = tiny_model(vocab_size=len(builtin_tokenizer), pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       decoder_start_token_id=1)  # fmt: skip
    model.save_pretrained(tmp_path / "model")
    builtin_tokenizer.save_pretrained(tmp_path / "model")
    corpus = tmp_path / "cmn.txt"
    corpus.write_text("".join(f"sentence {k}\t句子{k}。\tCC-BY 2.0 (France)\n" for k in range(2100)), encoding="utf-8")
    scores = evaluate_model_on_split(
        str(tmp_path / "model"), "valid", source_lang="en", target_lang="zh", corpus_file=corpus, num_beams=1
    )
    assert scores["num_sentences"] == 1000 and "tok:zh" in scores["bleu"]["signature"]
    assert scores["references"] == f"{corpus} (valid)" and scores["tokenized_references"] is None
    with pytest.raises(OutputError, match="corpus file"):
        evaluate_model_on_split(str(tmp_path / "model"), "valid", source_lang="en", target_lang="zh",
                                corpus_file=corpus, output_hypotheses=corpus)  # fmt: skip


def test_the_command_takes_the_direction_a_model_records_when_no_language_is_given(builtin_tokenizer, tmp_path, capsys):
    from conftest import tiny_model

    from vanilla_transformer.cli.main import main

    model = tmp_path / "release"
    tiny_model(vocab_size=len(builtin_tokenizer), pad_token_id=0, bos_token_id=1, eos_token_id=2,
               decoder_start_token_id=1).save_pretrained(model)  # fmt: skip
    builtin_tokenizer.save_pretrained(model)
    corpus = tmp_path / "cmn.txt"  # a name that says no direction
    corpus.write_text("".join(f"sentence {k}\t句子{k}。\tCC-BY 2.0 (France)\n" for k in range(2100)), encoding="utf-8")
    argv = ["evaluate", "--model", str(model), "--split", "valid", "--corpus-file", str(corpus), "--num-beams", "1"]
    with pytest.raises(SystemExit) as exited:  # nothing says which direction
        main(argv)
    assert exited.value.code == 2 and "give --source-lang and --target-lang" in capsys.readouterr().err
    (model / "results.json").write_text(json.dumps({"data": {"languages": ["en", "zh"]}}))
    main(argv)
    assert "tok:zh" in json.loads(capsys.readouterr().out)["bleu"]["signature"]


def test_a_model_is_scored_only_in_the_direction_it_records(tatoeba, capsys):
    from vanilla_transformer.cli.main import main

    release = REPO / "model_cards" / "vanilla-transformer-tatoeba-en-zh"  # results.json records en, zh
    argv = ["evaluate", "--model", str(release), "--split", "test", "--corpus-file", str(tatoeba)]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--source-lang", "zh", "--target-lang", "en"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exited.value.code == 2 and "translates en→zh" in error and "--source-lang en --target-lang zh" in error


def test_a_record_of_languages_that_is_not_an_object_counts_as_no_record(tmp_path):
    from vanilla_transformer.inference.evaluation import recorded_languages

    model = tmp_path / "run" / "final"
    model.mkdir(parents=True)
    for results, preset in (('{"data": [1]}', '{"run": "x"}'), ('{"data": {"languages": "en"}}', "[]")):
        (model / "results.json").write_text(results)
        (model.parent / "preset.json").write_text(preset)
        assert recorded_languages(model) is None
    (model.parent / "preset.json").write_text('{"run": {"source_lang": "en", "target_lang": "de"}}')
    assert recorded_languages(model)[:2] == ("en", "de")
