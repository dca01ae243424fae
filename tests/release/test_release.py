"""The released checkpoints in `model_cards/` (Multi30k En→De, Tatoeba En→Zh): load with the Auto classes and score
what their cards say."""

import hashlib
import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import tiny_model
from huggingface_hub import ModelCard
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer.cli.main import build_parser, main
from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.data.text import read_lines
from vanilla_transformer.data.tokenization import (
    load_tokenizer,
    lowercases,
    tokenizer_fingerprint,
    train_joint_bpe,
)
from vanilla_transformer.inference.scoring import score_translations
from vanilla_transformer.inference.translation import translate
from vanilla_transformer.release.build import (
    SMOKE_SENTENCES,
    ReleaseData,
    record_tokenizer_fingerprint,
    train_command,
    write_release,
)
from vanilla_transformer.release.folder_checks import CODE_FILES
from vanilla_transformer.release.hub import card_for_folder
from vanilla_transformer.training.presets import get_training_preset
from vanilla_transformer.training.run_folder import read_run_preset
from vanilla_transformer.training.settings import TrainingSettings, run_flags

REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "model_cards" / "vanilla-transformer-multi30k-en-de"
RELEASE_EN_ZH = REPO / "model_cards" / "vanilla-transformer-tatoeba-en-zh"


@pytest.mark.parametrize("release", [RELEASE, RELEASE_EN_ZH], ids=lambda path: path.name)
def test_release_folder_is_hub_ready(release):
    names = {p.name for p in release.iterdir()}
    expected = {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "README.md",
        *CODE_FILES,
    }
    assert expected <= names
    assert (release / "model.safetensors").stat().st_size <= 20 * 2**20
    # the remote code users download is this checkout's, with its fixes (e.g. for transformers 5.24's `cache`)
    for name in CODE_FILES:
        assert (release / name).read_text() == (REPO / "vanilla_transformer" / "model" / name).read_text(), (
            f"{release.name}/{name} differs from vanilla_transformer/model/{name}: copy it over"
        )
    config = json.loads((release / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    # the card's metadata parses with the Hub's own parser and carries the measured results
    card = ModelCard.load(release / "README.md")
    record = json.loads((release / "results.json").read_text())
    results = record["results"]
    reported = {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results}
    splits = [split for split in results if "[" not in split]
    assert splits == (["test"] if "file" in record.get("data", {}) else ["test2016", "test2017"])
    for split in splits:
        tokenized = results[split].get("tokenized_bleu", "–")
        assert reported[(split, "sacrebleu")] == results[split]["sacrebleu"]
        assert reported.get((split, "bleu"), "–") == tokenized
        assert f"| {split} | {tokenized} | {results[split]['sacrebleu']} | {results[split]['chrf']} |" in card.text
    # the card is the one its results.json renders (a push without README.md gets the same)
    assert card_for_folder(release).text == card.text


def test_fifty_test2016_sentences_score_as_the_card_says(multi30k):
    tokenizer = AutoTokenizer.from_pretrained(RELEASE)
    model = AutoModelForSeq2SeqLM.from_pretrained(RELEASE).eval()
    sources = read_lines(multi30k / "test2016.en")[:SMOKE_SENTENCES]
    references = read_lines(multi30k / "test2016.de")[:SMOKE_SENTENCES]
    scores = score_translations(translate(model, tokenizer, sources), references, lowercase=lowercases(tokenizer))
    card = json.loads((RELEASE / "results.json").read_text())["results"][f"test2016[:{SMOKE_SENTENCES}]"]
    assert abs(scores["bleu"]["score"] - card["sacrebleu"]) <= 2.0


def test_fifty_tatoeba_test_sentences_score_as_the_en_zh_card_says(tatoeba):
    from vanilla_transformer.release.build import ReleaseData

    record = json.loads((RELEASE_EN_ZH / "results.json").read_text())
    assert record["data"]["sha256"] == hashlib.sha256(tatoeba.read_bytes()).hexdigest()
    tokenizer = AutoTokenizer.from_pretrained(RELEASE_EN_ZH)
    model = AutoModelForSeq2SeqLM.from_pretrained(RELEASE_EN_ZH).eval()
    sources, references = ReleaseData(corpus_file=tatoeba, source_lang="en", target_lang="zh").pairs("test")
    translations = translate(model, tokenizer, sources[:SMOKE_SENTENCES])
    scores = score_translations(translations, references[:SMOKE_SENTENCES], lang="zh")
    card = record["results"][f"test[:{SMOKE_SENTENCES}]"]
    assert "tok:zh" in scores["bleu"]["signature"] and card["signature"] == scores["bleu"]["signature"]
    assert abs(scores["bleu"]["score"] - card["sacrebleu"]) <= 2.0
    assert abs(scores["chrf"]["score"] - card["chrf"]) <= 2.0


def test_write_release_renders_its_card_from_the_template(tmp_path, monkeypatch):
    from vanilla_transformer.release.build import write_release
    from vanilla_transformer.release.folder_checks import validate_folder

    def scores(bleu: float, chrf: float, tokenized: float | None) -> dict:
        result = {"bleu": {"score": bleu, "signature": "nrefs:1|sig"}, "chrf": {"score": chrf}}
        return result | ({"tokenized_bleu": {"score": tokenized}} if tokenized is not None else {})

    results = {"test2016": scores(40.123, 60.0, 41.5), "test2017": scores(33.0, 55.5, 34.25)}
    results["test2016[:50]"] = scores(39, 59, None)
    training = json.loads((RELEASE / "results.json").read_text())["training"]
    model_files = tmp_path / "final"
    model_files.mkdir()
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        *CODE_FILES,
    ):
        (model_files / name).write_bytes((RELEASE / name).read_bytes())
    run_preset = get_training_preset("multi30k", dropout=0.25).as_dict()
    monkeypatch.chdir(REPO)
    release = write_release(
        model_files, tmp_path / "release", results, training, run_preset, " --length-penalties 0.6,1.5"
    )
    card = ModelCard.load(release / "README.md")
    assert {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results} == {
        ("test2016", "bleu"): 41.5, ("test2016", "sacrebleu"): 40.12, ("test2016", "chrf"): 60.0,
        ("test2017", "bleu"): 34.25, ("test2017", "sacrebleu"): 33.0, ("test2017", "chrf"): 55.5,
    }  # fmt: skip
    assert "| test2016[:50] | – | 39 | 59 |" in card.text and "vanilla-transformer release --run-dir" in card.text
    assert "vanilla-transformer train --preset multi30k --dropout 0.25 --output-dir outputs/release" in card.text
    assert "--output-dir release --length-penalties 0.6,1.5" in card.text
    assert f"the paper's beam search ({training['hyperparameters']['decoding']})" in card.text
    assert validate_folder(release) == []


def test_a_release_of_a_tsv_run_states_its_data_terms_languages_and_examples(tmp_path):
    from vanilla_transformer.release.build import write_release

    scores = {"bleu": {"score": 21.234, "signature": "nrefs:1|case:mixed|eff:no|tok:zh|smooth:exp|version:2.6.0"}}
    results = {"test": scores | {"chrf": {"score": 19.5}}, "test[:50]": scores | {"chrf": {"score": 18.0}}}
    data = {
        "dataset": "tatoeba",
        "languages": ["en", "zh"],
        "file": "cmn.txt",
        "sha256": "ab" * 32,
        "pairs": {"train": 27155, "valid": 1000, "test": 1000},
        "contributors": 321,
    }
    examples = [{"source": "Who's there | here?", "reference": "谁在那里？", "translation": "谁在那儿？"}]
    training = json.loads((RELEASE / "results.json").read_text())["training"]
    run_preset = get_training_preset("multi30k", corpus="/data/elsewhere/cmn.txt", warmup_steps=600).as_dict()
    release = write_release(RELEASE, tmp_path / "en-zh", results, training, run_preset, "", False, data, examples)
    card = ModelCard.load(release / "README.md")
    assert card.data.license == "cc-by-2.0" and card.data.language == ["en", "zh"]
    assert {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results} == {
        ("test", "sacrebleu"): 21.23,
        ("test", "chrf"): 19.5,
    }
    assert "CC-BY 2.0 France" in card.text and "321\nTatoeba contributors" in card.text
    assert "27155 training,\n1000 valid and 1000 test pairs" in card.text and "ab" * 32 in card.text
    assert "its `zh` tokenizer" in card.text and "English→Chinese" in card.text
    assert "| Who's there \\| here? | 谁在那里？ | 谁在那儿？ |" in card.text  # a "|" does not break the table
    # the reproduce lines: the file under its own name, and the languages the run trained on
    assert (
        "vanilla-transformer train --preset multi30k --corpus cmn.txt --warmup-steps 600 --source-lang en "
        "--target-lang zh --output-dir outputs/en-zh" in card.text
    )
    assert "release --run-dir outputs/en-zh --output-dir en-zh --source-lang en --target-lang zh" in card.text
    record = json.loads((release / "results.json").read_text())
    assert record["data"] == data and record["examples"] == examples
    # a card rendered again from results.json alone (a push of the folder without README.md) says the same
    assert card_for_folder(release).text == card.text


def test_the_card_explains_a_tokenizer_by_what_sacrebleu_would_pick():
    from vanilla_transformer.files.model_card import render_model_card

    training = json.loads((RELEASE / "results.json").read_text())["training"]

    def card(tokenizer: str, languages: tuple[str, str]) -> str:
        scores = {"sacrebleu": 30.0, "chrf": 50.0, "signature": f"nrefs:1|case:mixed|eff:no|tok:{tokenizer}"}
        return render_model_card("m", {"test": scores}, training, dataset="x", languages=languages).text

    assert "which Japanese text has none of" in card("ja-mecab", ("en", "ja"))
    overridden = card("intl", ("en", "de"))  # --bleu-tokenize intl for German: no claim about spaces
    assert "sacreBLEU tokenizes with `intl`" in overridden and "none of" not in overridden
    assert "tokeniz" not in card("13a", ("en", "de")).split("## Results")[1].split("| split")[0]


def test_release_data_of_the_tatoeba_file_counts_its_splits_and_contributors(tatoeba):
    from vanilla_transformer.release.build import ReleaseData

    data = ReleaseData(corpus_file=tatoeba, source_lang="en", target_lang="zh")
    record = data.record()
    assert record["pairs"] == {"train": 27155, "valid": 1000, "test": 1000}
    assert record["file"] == "cmn.txt" and record["dataset"] == "tatoeba" and record["languages"] == ["en", "zh"]
    assert 100 < record["contributors"] < 5000
    sources, references = data.pairs("test")
    assert len(sources) == len(references) == 1000 and all(sources) and all(references)
    assert data.test_splits == ("test",) and ReleaseData().test_splits == ("test2016", "test2017")


def test_train_command_names_the_closest_preset_and_a_flag_per_change(tmp_path):
    from vanilla_transformer.release.build import train_command

    demo = get_training_preset("demo").as_dict()
    assert train_command(demo, "out") == "vanilla-transformer train --preset demo --output-dir out"
    # a run recorded before the lowercase field existed is the demo preset still
    del demo["lowercase"]
    (tmp_path / "preset.json").write_text(json.dumps(demo))
    assert train_command(read_run_preset(tmp_path / "preset.json"), "out") == (
        "vanilla-transformer train --preset demo --output-dir out"
    )
    run = json.loads(json.dumps(get_training_preset("multi30k", dropout=0.25, lr_factor=1.0, max_steps=9000).as_dict()))
    assert train_command(run, "out") == (
        "vanilla-transformer train --preset multi30k --max-steps 9000 --lr-factor 1.0 --dropout 0.25 --output-dir out"
    )
    run["corpus"] = str(tmp_path)
    assert f"--corpus {tmp_path}" in train_command(run, "out")
    run["lowercase"] = True
    assert train_command(run, "out").endswith("--dropout 0.25 --lowercase --output-dir out")
    run["model_overrides"] = [["encoder_layers", 2]]
    with pytest.raises(ValueError, match="model_overrides.*no flag"):
        train_command(run, "out")


def test_a_run_recorded_with_the_path_of_the_multi30k_files_trained_the_multi30k_preset(multi30k, tmp_path):
    from vanilla_transformer.release.build import train_command

    # runs recorded before Multi30k had a name hold the path of its folder (../shared/data/multi30k)
    run = json.loads(json.dumps(get_training_preset("multi30k", dropout=0.25).as_dict())) | {"corpus": str(multi30k)}
    assert train_command(run, "out").endswith(" --preset multi30k --dropout 0.25 --output-dir out")
    # a folder of other files under the same name is another corpus
    other = tmp_path / "multi30k"
    other.mkdir()
    for name in ("train.en", "train.de", "valid.en", "valid.de"):
        (other / name).write_text(read_lines(multi30k / name)[0] + "\n")
    run["corpus"] = str(other)
    assert f"--corpus {other}" in train_command(run, "out")


@pytest.mark.slow
def test_the_length_penalty_is_chosen_on_valid_and_becomes_the_folders_default(multi30k, tmp_path):
    from transformers import GenerationConfig

    from vanilla_transformer.inference.evaluation import evaluate_model_on_split
    from vanilla_transformer.release.build import (
        ReleaseData,
        adopt_best_length_penalty,
        set_length_penalty,
        tune_length_penalty,
    )

    data = tmp_path / "data"
    (data / "tok").mkdir(parents=True)
    for name in ("valid.en", "valid.de", "tok/valid.lc.norm.tok.de"):
        (data / name).write_text("\n".join(read_lines(multi30k / name)[:40]) + "\n")
    folder = tmp_path / "model"
    folder.mkdir()
    for path in RELEASE.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())

    on_valid = tune_length_penalty(folder, ReleaseData(data), [0.0, 3.0])
    assert adopt_best_length_penalty(folder, ReleaseData(data), [0.0, 3.0]) == on_valid
    assert GenerationConfig.from_pretrained(folder).length_penalty == max(on_valid, key=on_valid.get)
    set_length_penalty(folder, 3.0)
    assert GenerationConfig.from_pretrained(folder).length_penalty == 3.0
    long = evaluate_model_on_split(str(folder), "valid", data, output_hypotheses=tmp_path / "long")
    short = evaluate_model_on_split(str(folder), "valid", data, output_hypotheses=tmp_path / "short", length_penalty=0)
    assert (long["length_penalty"], short["length_penalty"]) == (3.0, 0)
    assert round(long["tokenized_bleu"]["score"], 2) == on_valid[3.0]
    assert round(short["tokenized_bleu"]["score"], 2) == on_valid[0.0]
    # a larger α favours longer translations
    assert long["bleu"]["sys_len"] > short["bleu"]["sys_len"]


def test_training_summary_counts_what_the_run_did(tmp_path):
    from vanilla_transformer.release.build import training_summary

    run, final = tmp_path / "run", tmp_path / "run" / "final"
    final.mkdir(parents=True)
    for path in RELEASE.iterdir():
        (final / path.name).write_bytes(path.read_bytes())
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "tokenizer.json").write_text("{}")
    preset = get_training_preset("multi30k").as_dict()
    averaged = []
    for step in (1200, 1400):
        (run / f"checkpoint-{step}").mkdir()
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": 6.03}))
        averaged.append(run / f"checkpoint-{step}")

    training = training_summary(
        run, preset, final, averaged, "a test CPU", "final", train_hours=2.5, on_valid={0.6: 1.5}
    )
    card = json.loads((RELEASE / "results.json").read_text())["training"]
    assert training["parameters"] == card["parameters"]
    assert (training["updates"], training["epochs"], training["wall_clock_hours"]) == (1400, 6.03, 2.5)
    assert training["averaged_checkpoints"] == ["checkpoint-1200", "checkpoint-1400"]
    assert training["bleu_on_valid_by_length_penalty"] == {"0.6": 1.5} and training["valid_metric"] == "BLEU (tok)"
    length_penalty = json.loads((final / "generation_config.json").read_text())["length_penalty"]
    assert "1400 updates (6.0 epochs) in 2.5 h wall-clock on a test CPU" in training["summary"]
    assert (
        f"checkpoints 1200, 1400. Length penalty α={length_penalty}, the best on valid (BLEU (tok) 0.6: 1.5)"
        in (training["summary"])
    )
    # the accelerate loop's checkpoints hold no trainer_state.json: the step is in their name, the epochs unrecorded
    for folder in averaged:
        (folder / "trainer_state.json").unlink()
    loop = training_summary(run, preset, final, averaged, "a test CPU", "final", train_hours=2.5)
    assert (loop["updates"], loop["epochs"]) == (1400, None)
    assert "1400 updates in 2.5 h wall-clock on a test CPU" in loop["summary"]
    # without --train-hours: from the tokenizer file to the last averaged checkpoint
    os.utime(run / "tokenizer" / "tokenizer.json", (0, 0))
    os.utime(averaged[-1], (5400, 5400))
    assert training_summary(run, preset, final, averaged, "a test CPU", "final")["wall_clock_hours"] == 1.5


# -- provenance: a release is scored on what its run trained on, reproduced with what it recorded ---------------------

ATTRIBUTION = "CC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)"


def run_record(preset: str = "demo", **settings) -> dict:
    """A run's preset.json as training writes it: the preset's fields and its `"run"` settings."""
    corpus = settings.pop("corpus", None)
    if "precision" in settings:
        settings["mixed_precision"] = settings.pop("precision")
    settings = {"source_lang": "en", "target_lang": "de", **settings}
    return TrainingSettings(get_training_preset(preset, corpus=corpus), "out", **settings).record()


@pytest.fixture
def tsv_files(tmp_path) -> tuple[Path, Path]:
    """Two TSV files of other pairs: the one a run trained on, and another."""
    (tmp_path / "data").mkdir()
    trained_on, other = tmp_path / "data" / "cmn.txt", tmp_path / "other.txt"
    trained_on.write_text(f"Hi.\t嗨。\t{ATTRIBUTION}\n", encoding="utf-8")
    other.write_text(f"Run!\t你用跑的。\t{ATTRIBUTION}\n", encoding="utf-8")
    return trained_on, other


def test_release_data_of_a_tsv_run_is_its_file_in_its_languages(tsv_files, tmp_path):
    trained_on, other = tsv_files
    run = run_record(corpus=str(trained_on), source_lang="en", target_lang="zh")
    assert ReleaseData.for_run(run) == ReleaseData(None, str(trained_on), "en", "zh")
    assert ReleaseData.for_run(run, source_lang="en", target_lang="zh") == ReleaseData(
        None, str(trained_on), "en", "zh"
    )
    copy = shutil.copy(trained_on, tmp_path / "elsewhere.tsv")  # the same content under another name
    assert ReleaseData.for_run(run, corpus_file=copy) == ReleaseData(None, copy, "en", "zh")
    refusals = [
        ({"corpus_file": other}, f"{other} is not the file the run trained on: its content differs"),
        ({"data_dir": tmp_path}, f"--data-dir {tmp_path}: the run trained on the TSV file {trained_on}"),
        ({"source_lang": "zh", "target_lang": "en"}, "--source-lang zh: the run trained with --source-lang en"),
        ({"target_lang": "ja"}, "--target-lang ja: the run trained with --target-lang zh"),
    ]
    for options, expected in refusals:
        with pytest.raises(ValueError) as refusal:
            ReleaseData.for_run(run, **options)
        assert expected in str(refusal.value), options
    # the file edited since the run: refused, by content
    trained_on.write_text(trained_on.read_text(encoding="utf-8") * 2, encoding="utf-8")
    with pytest.raises(ValueError, match=f"{trained_on} is not the file the run trained on"):
        ReleaseData.for_run(run)
    # the file gone: the same content given with --corpus-file is accepted
    trained_on.unlink()
    with pytest.raises(ValueError, match="is not there any more: give it with --corpus-file"):
        ReleaseData.for_run(run)
    assert ReleaseData.for_run(run, corpus_file=copy) == ReleaseData(None, copy, "en", "zh")
    with pytest.raises(ValueError, match="is not the file the run trained on"):
        ReleaseData.for_run(run, corpus_file=other)


def test_release_data_of_a_run_recorded_before_its_settings_needs_its_languages(tsv_files):
    trained_on, other = tsv_files
    run = json.loads(json.dumps(get_training_preset("demo", corpus=str(trained_on)).as_dict()))
    with pytest.raises(ValueError, match="give --source-lang and --target-lang"):
        ReleaseData.for_run(run)
    assert ReleaseData.for_run(run, source_lang="en", target_lang="zh").corpus_file == str(trained_on)
    with pytest.raises(ValueError, match=f"--corpus-file {other}: the run trained on {trained_on}"):
        ReleaseData.for_run(run, corpus_file=other, source_lang="en", target_lang="zh")


def test_release_data_of_a_multi30k_run_is_multi30k_and_runs_without_a_test_set_are_refused(tsv_files, tmp_path):
    trained_on, _ = tsv_files
    multi30k = run_record("multi30k")
    assert ReleaseData.for_run(multi30k) == ReleaseData(None, None, "en", "de")
    assert ReleaseData.for_run(multi30k, data_dir=tmp_path) == ReleaseData(tmp_path, None, "en", "de")
    with pytest.raises(ValueError, match=f"--corpus-file {trained_on}: the run trained on Multi30k"):
        ReleaseData.for_run(multi30k, corpus_file=trained_on)
    with pytest.raises(ValueError, match="--source-lang fr: the run trained with --source-lang en"):
        ReleaseData.for_run(multi30k, source_lang="fr")
    for run, kind in [(run_record("demo"), "the built-in corpus"), (run_record(corpus="wmt14"), "'wmt14'")]:
        for options in ({}, {"data_dir": tmp_path}, {"corpus_file": trained_on}):
            with pytest.raises(ValueError) as refusal:
                ReleaseData.for_run(run, **options)
            assert f"the run trained on {kind}, and a release is scored on the test sets of its training data" in str(
                refusal.value
            )
            assert "Score the run with `vanilla-transformer evaluate` instead." in str(refusal.value)


def test_the_release_command_refuses_data_the_run_did_not_train_on(tsv_files, tmp_path, capsys):
    trained_on, other = tsv_files
    run_dir, data_dir = tmp_path / "run", tmp_path / "multi30k-files"
    run_dir.mkdir()
    data_dir.mkdir()
    cases = [
        (run_record("demo"), ["--data-dir", str(data_dir)], "the run trained on the built-in corpus"),
        (run_record("multi30k"), ["--corpus-file", str(trained_on)], "the run trained on Multi30k"),
        (run_record(corpus=str(trained_on), target_lang="zh"), ["--corpus-file", str(other)], "content differs"),
        (run_record(corpus=str(trained_on), target_lang="zh"), ["--data-dir", str(data_dir)], "--data-dir"),
        (run_record(corpus=str(trained_on), target_lang="zh"), ["--target-lang", "de"], "--target-lang de: the run"),
    ]
    for record, flags, expected in cases:
        (run_dir / "preset.json").write_text(json.dumps(record, indent=2) + "\n")
        before = {path: path.read_bytes() if path.is_file() else None for path in tmp_path.rglob("*")}
        with pytest.raises(SystemExit) as exited:
            main(["release", "--run-dir", str(run_dir), "--output-dir", str(tmp_path / "release"), *flags])
        assert exited.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert error[-1].startswith("error: ") and expected in error[-1] and "Traceback" not in "".join(error)
        assert {path: path.read_bytes() if path.is_file() else None for path in tmp_path.rglob("*")} == before


def test_train_command_adds_the_runs_recorded_settings_as_flags_the_train_command_takes():
    defaults = run_record("multi30k")
    assert train_command(defaults, "out") == "vanilla-transformer train --preset multi30k --output-dir out"
    record = run_record("multi30k", seed=3, precision="bf16", per_device_batch_size=16, max_grad_norm=1.0)
    line = train_command(record, "out", "en", "zh")
    assert line == (
        "vanilla-transformer train --preset multi30k --seed 3 --bf16 --per-device-batch-size 16 --max-grad-norm 1.0 "
        "--source-lang en --target-lang zh --output-dir out"
    )
    # the line is one the command takes, with the run's settings
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert (args.seed, args.bf16, args.fp16, args.per_device_batch_size, args.max_grad_norm) == (
        3,
        True,
        False,
        16,
        1.0,
    )
    assert (args.preset, args.source_lang, args.target_lang) == ("multi30k", "en", "zh")
    on_a_gpu = run_record("multi30k")  # fp16 settings are refused on this CPU: the record a GPU run writes
    on_a_gpu["run"]["precision"] = "fp16"
    assert " --fp16" in train_command(on_a_gpu, "out")
    assert run_flags({"seed": 3, "precision": "bf16"}) == " --seed 3 --bf16"


def test_the_reproduce_line_of_a_run_given_a_tokenizer_or_a_bpe_sample_carries_it(tmp_path, builtin_tokenizer):
    given = tmp_path / "my tokenizer"
    builtin_tokenizer.save_pretrained(given)
    args = build_parser().parse_args(["train", "--output-dir", "out", "--tokenizer", str(given)])
    settings = TrainingSettings.from_arguments(args, "train", None)
    line = train_command(settings.record(), "out")
    assert line.startswith("vanilla-transformer train --preset demo --tokenizer ")
    assert build_parser().parse_args(shlex.split(line)[1:]).tokenizer == str(given.resolve())  # quoted: it has a space
    args = build_parser().parse_args(["train", "--output-dir", "out", "--tokenizer-sample", "500"])
    line = train_command(TrainingSettings.from_arguments(args, "train", None).record(), "out")
    assert line == "vanilla-transformer train --preset demo --tokenizer-sample 500 --output-dir out"
    args = build_parser().parse_args(["train", "--output-dir", "out"])  # the default sample: no flag
    line = train_command(TrainingSettings.from_arguments(args, "train", None).record(), "out")
    assert line == "vanilla-transformer train --preset demo --output-dir out"


def model_folder(folder: Path, tokenizer) -> Path:
    """A saved tiny model with `tokenizer` beside it, its config.json recording no tokenizer fingerprint."""
    tiny_model(vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text()).get("tokenizer_fingerprint") is None
    return folder


@pytest.fixture(scope="module")
def other_tokenizer():
    """A tokenizer with other ids than `builtin_tokenizer`: trained on the same text with a smaller vocabulary."""
    pairs = load_builtin("train")["translation"]
    return train_joint_bpe([p["en"] for p in pairs] + [p["de"] for p in pairs], vocab_size=400)


def test_record_tokenizer_fingerprint_adds_the_fingerprint_and_refuses_another_tokenizers(
    tmp_path, builtin_tokenizer, other_tokenizer
):
    folder = model_folder(tmp_path / "model", builtin_tokenizer)
    config = json.loads((folder / "config.json").read_text())
    fingerprint = tokenizer_fingerprint(load_tokenizer(folder))
    assert fingerprint == tokenizer_fingerprint(builtin_tokenizer) != tokenizer_fingerprint(other_tokenizer)
    assert record_tokenizer_fingerprint(folder) == fingerprint
    assert json.loads((folder / "config.json").read_text()) == config | {"tokenizer_fingerprint": fingerprint}
    written = (folder / "config.json").read_bytes()
    assert record_tokenizer_fingerprint(folder) == fingerprint and (folder / "config.json").read_bytes() == written
    # another run's tokenizer put beside the model: refused, the config kept
    other_tokenizer.save_pretrained(folder)
    with pytest.raises(ValueError) as refusal:
        record_tokenizer_fingerprint(folder)
    assert f"records another tokenizer than the one beside it (fingerprint {fingerprint[:12]}… vs " in str(
        refusal.value
    )
    assert (folder / "config.json").read_bytes() == written


def test_write_release_records_the_run_and_refuses_a_model_with_another_tokenizer(
    tmp_path, builtin_tokenizer, other_tokenizer
):
    results = {"test2016": {"bleu": {"score": 1.0, "signature": "nrefs:1|sig"}, "chrf": {"score": 2.0}}}
    training = json.loads((RELEASE / "results.json").read_text())["training"]
    run = run_record("demo", seed=3, precision="bf16")
    final = model_folder(tmp_path / "final", builtin_tokenizer)
    release = write_release(final, tmp_path / "release", results, training, run)
    config = json.loads((release / "config.json").read_text())
    assert config["tokenizer_fingerprint"] == tokenizer_fingerprint(builtin_tokenizer)
    assert json.loads((final / "config.json").read_text())["tokenizer_fingerprint"] is None  # the run's model kept
    record = json.loads((release / "results.json").read_text())
    assert record["run"] == run["run"]
    assert record["reproduce"][0] == (
        "vanilla-transformer train --preset demo --seed 3 --bf16 --output-dir outputs/release"
    )
    assert "--seed 3 --bf16" in (release / "README.md").read_text()
    # a model whose config records another tokenizer than the one beside it is not released
    config = json.loads((final / "config.json").read_text())
    config["tokenizer_fingerprint"] = tokenizer_fingerprint(other_tokenizer)
    (final / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="records another tokenizer than the one beside it"):
        write_release(final, tmp_path / "refused", results, training, run)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["final", "release"]  # nothing staged is left


def test_every_release_folder_records_its_own_tokenizers_fingerprint():
    folders = sorted(path for path in (REPO / "model_cards").iterdir() if path.is_dir())
    assert {RELEASE, RELEASE_EN_ZH} <= set(folders)
    for folder in folders:
        config = json.loads((folder / "config.json").read_text())
        assert config.get("tokenizer_fingerprint") == tokenizer_fingerprint(load_tokenizer(folder)), folder.name


def test_a_release_scored_on_other_files_than_multi30ks_says_so_and_how_to_repeat_it(multi30k, tmp_path, capsys):
    run_dir, data_dir = tmp_path / "run", tmp_path / "first-20"
    (run_dir / "checkpoint-1").mkdir(parents=True)
    for path in RELEASE.iterdir():
        if path.name not in ("README.md", "results.json"):
            shutil.copy2(path, run_dir / "checkpoint-1" / path.name)
    (run_dir / "checkpoint-1" / "trainer_state.json").write_text('{"global_step": 1, "epoch": 0.01}')
    (run_dir / "preset.json").write_text(json.dumps(run_record("multi30k"), indent=2) + "\n")
    (data_dir / "tok").mkdir(parents=True)
    for split in ("valid", "test2016", "test2017"):
        for name in (f"{split}.en", f"{split}.de", f"tok/{split}.lc.norm.tok.de"):
            (data_dir / name).write_text("\n".join(read_lines(multi30k / name)[:20]) + "\n", encoding="utf-8")
    argv = ["release", "--run-dir", str(run_dir), "--output-dir", str(tmp_path / "release"), "--last", "1"]
    argv += ["--train-hours", "0.1", "--hardware", "a test"]
    main([*argv, "--data-dir", str(data_dir)])
    capsys.readouterr()
    card = (tmp_path / "release" / "README.md").read_text()
    assert "1,000 each" not in card and "not on Multi30k's official files" in card
    assert "valid: 20 pairs, test2016: 20 pairs, test2017: 20 pairs" in card
    assert "--output-dir release --data-dir first-20 --last 1" in card
    assert "Multi30k Task 1 test2016 (not the official files)" in card
    assert ReleaseData().record() == {"dataset": "multi30k", "languages": ["en", "de"]}  # the official files
