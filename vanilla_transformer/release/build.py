"""A Hub-ready release folder: the averaged model, its tokenizer and code files, measured test scores, and a model
card (`README.md` with YAML metadata and `model-index` results)."""

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from ..data.anki import ATTRIBUTION, SPLITS
from ..data.corpora import BUILTIN, MULTI30K, corpus_languages, corpus_sha256, load_corpus, sides
from ..data.multi30k import GUNZIPPED, MULTI30K_ENV, holds_multi30k, multi30k_dir
from ..data.text import file_sha256, read_lines
from ..data.tokenization import load_tokenizer, lowercases, tokenizer_fingerprint
from ..errors import SettingsError
from ..files.model_card import card_from_release_record, training_hyperparameters
from ..files.outputs import check_not_an_input, check_output_folder, staged_file, staged_folder
from ..inference.evaluation import evaluate_model_on_split
from ..inference.scoring import score_translations
from ..training.checkpoints import checkpoint_step
from ..training.presets import PRESET_FLAGS, TRAINING_PRESETS
from ..training.run_folder import same_setting
from ..training.settings import run_flags

SMOKE_SENTENCES = 50  # the first N sentences of the first test split, re-scored by a test against the card
EXAMPLE_EVERY = 100  # the card shows every 100th sentence of the first test split with its translation


@dataclass(frozen=True)
class ReleaseData:
    """Where a release is tuned (α on valid) and scored: Multi30k's test2016 and test2017 (`data_dir`, None for
    `multi30k_dir()`), or an Anki/Tatoeba TSV file's own test split (`corpus_file`)."""

    data_dir: str | Path | None = None
    corpus_file: str | Path | None = None
    source_lang: str = "en"
    target_lang: str = "de"

    @property
    def test_splits(self) -> tuple[str, ...]:
        return ("test",) if self.corpus_file else ("test2016", "test2017")

    @property
    def valid_metric(self) -> str:  # the BLEU `tune_length_penalty` compares: tokenized where Multi30k has a reference
        return "sacreBLEU" if self.corpus_file else "BLEU (tok)"

    def evaluate(self, folder: str | Path, split: str, **kwargs) -> dict:
        return evaluate_model_on_split(
            str(folder),
            split,
            self.data_dir,
            source_lang=self.source_lang,
            target_lang=self.target_lang,
            corpus_file=self.corpus_file,
            **kwargs,
        )

    def pairs(self, split: str) -> tuple[list[str], list[str]]:
        if self.corpus_file:
            corpus = load_corpus(str(self.corpus_file), split, self.source_lang, self.target_lang)
            return sides(corpus, self.source_lang, self.target_lang)
        folder = multi30k_dir(self.data_dir, languages=(self.source_lang, self.target_lang))
        return read_lines(folder / f"{split}.{self.source_lang}"), read_lines(folder / f"{split}.{self.target_lang}")

    @classmethod
    def for_run(
        cls,
        run_preset: dict,
        data_dir: str | Path | None = None,
        corpus_file: str | Path | None = None,
        source_lang: str | None = None,
        target_lang: str | None = None,
    ) -> "ReleaseData":
        """The data to score a run's release on, from what its `preset.json` (`run_preset`) says it trained on: a
        Multi30k run on Multi30k, a TSV run on that file's test split, in the run's languages. Raises a
        `SettingsError` for other data or languages than the run's, or a corpus with no test set of its own."""
        corpus = str(run_preset.get("corpus", MULTI30K))
        recorded = run_preset.get("run", {})
        given = {"--source-lang": source_lang, "--target-lang": target_lang}
        for (flag, value), field in zip(given.items(), ("source_lang", "target_lang"), strict=True):
            if value and recorded.get(field) and value != recorded[field]:
                raise SettingsError(
                    f"{flag} {value}: the run trained with {flag} {recorded[field]} (its preset.json); leave the flag "
                    f"out, or give the run's own."
                )
        source_lang = source_lang or recorded.get("source_lang")
        target_lang = target_lang or recorded.get("target_lang")
        # a local corpus gone since the run: one whose digest it recorded (a `datasets` name has none), or in a record
        # older than run settings, one a file is given for
        gone = (
            corpus not in (BUILTIN, MULTI30K)
            and not Path(corpus).exists()
            and (recorded.get("corpus_sha256") is not None or (not recorded and bool(corpus_file)))
        )
        # a TSV file, or a gone corpus, scored on the file given for it (its digest, if recorded, decides below)
        trained_on_file = Path(corpus).is_file() or (gone and bool(corpus_file or not data_dir))
        if corpus == BUILTIN or not (trained_on_file or corpus == MULTI30K or holds_multi30k(corpus)):
            kind = "the built-in corpus" if corpus == BUILTIN else f"{corpus!r}"
            raise SettingsError(
                f"the run trained on {kind}, and a release is scored on the test sets of its training data "
                f"(Multi30k's, or a TSV file's own), which {kind} lacks. Score the run with `vanilla-transformer "
                f"evaluate` instead."
            )
        if not trained_on_file:
            if corpus_file:
                raise SettingsError(
                    f"--corpus-file {corpus_file}: the run trained on Multi30k (its preset.json), not on a TSV file; "
                    f"leave --corpus-file out to score it on Multi30k's test sets."
                )
            folder = data_dir or (corpus if corpus != MULTI30K else None)
            return cls(folder, None, source_lang or "en", target_lang or "de")
        if data_dir:
            raise SettingsError(
                f"--data-dir {data_dir}: the run trained on the TSV file {corpus} (its preset.json), scored on its "
                f"own test split; leave --data-dir out."
            )
        file = corpus_file or corpus
        digest = recorded.get("corpus_sha256")
        if not Path(file).is_file():
            raise SettingsError(
                f"the run's corpus file {file} is not there any more: give it with --corpus-file (the same content"
                f"{f', sha256 {digest[:12]}…' if digest else ''})."
            )
        if digest and corpus_sha256(str(file)) != digest:
            raise SettingsError(
                f"{file} is not the file the run trained on: its content differs (the run recorded sha256 "
                f"{digest[:12]}… for {corpus}); give that file with --corpus-file."
            )
        if not digest and corpus_file and not same_setting("corpus", str(corpus_file), corpus):
            raise SettingsError(
                f"--corpus-file {corpus_file}: the run trained on {corpus} (its preset.json); give that file, or leave "
                f"--corpus-file out."
            )
        if not (source_lang and target_lang):  # a run recorded before its languages were
            source_lang, target_lang = corpus_languages(str(file), source_lang, target_lang)
        return cls(None, file, source_lang, target_lang)

    def record(self) -> dict:
        """What the card says of the data: dataset and languages, and for a TSV file its name, SHA-256, split sizes
        and number of Tatoeba contributors (the third column credits each pair's sentences to their users)."""
        record = {"dataset": "multi30k", "languages": [self.source_lang, self.target_lang]}
        if not self.corpus_file:
            if self.data_dir is None and not os.environ.get(MULTI30K_ENV):
                return record  # the download cache, whose files are checked against the official sums on every use
            # a folder given (--data-dir, $VANILLA_TRANSFORMER_MULTI30K) of other files than the official ones (a
            # subset, another version): the card says so
            folder = multi30k_dir(self.data_dir, languages=(self.source_lang, self.target_lang))
            splits = ("valid", *self.test_splits)
            names = [f"{split}.{lang}" for split in splits for lang in (self.source_lang, self.target_lang)]
            if all(name in GUNZIPPED for name in names) and holds_multi30k(folder, names):
                return record
            pairs = {split: len(read_lines(folder / f"{split}.{self.source_lang}")) for split in splits}
            return record | {"other_files": {"folder": folder.name, "pairs": pairs}}
        path = Path(self.corpus_file)
        splits = {split: load_corpus(str(path), split, self.source_lang, self.target_lang) for split in SPLITS}
        users = {
            user
            for dataset in splits.values()
            for credit in dataset[ATTRIBUTION]
            for user in re.findall(r"#\d+ \(([^)]*)\)", credit)
        }
        return record | {
            "dataset": "tatoeba",
            "file": path.name,
            "sha256": file_sha256(path),
            "pairs": {split: len(dataset) for split, dataset in splits.items()},
            "contributors": len(users),
        }


def language_flags(source_lang: str, target_lang: str) -> str:
    """The commands' language flags, for a pair other than their default en→de."""
    if (source_lang, target_lang) == ("en", "de"):
        return ""
    return f" --source-lang {source_lang} --target-lang {target_lang}"


def train_command(run_preset: dict, output_dir: str, source_lang: str = "en", target_lang: str = "de") -> str:
    """The `vanilla-transformer train` line that trains a run with this `preset.json`: the named preset it differs
    least from, a flag for each field it changed and for each non-default setting of its `"run"` record. A change no
    flag can make raises."""
    recorded_flags = run_flags(run_preset["run"]) if run_preset.get("run") else ""
    run_preset = json.loads(json.dumps(run_preset))  # compare as preset.json holds them: lists, not tuples

    def changed(name: str) -> list[str]:
        preset = json.loads(json.dumps(TRAINING_PRESETS[name].as_dict()))
        return [field for field in preset if not same_setting(field, run_preset.get(field), preset[field])]

    name = min(TRAINING_PRESETS, key=lambda name: len(changed(name)))
    unflagged = [field for field in changed(name) if field not in PRESET_FLAGS]
    if unflagged:
        raise SettingsError(
            f"the run's preset differs from {name!r} in {unflagged}, which `vanilla-transformer train` has no flag "
            f"for; add the run as a named preset in training/presets.py."
        )

    def flag(field: str) -> str:
        name, value = field.replace("_", "-"), run_preset[field]
        if isinstance(value, bool):
            return f" --{name}" if value else f" --no-{name}"
        return f" --{name} {value}"

    flags = "".join(flag(field) for field in changed(name)) + recorded_flags + language_flags(source_lang, target_lang)
    return f"vanilla-transformer train --preset {name}{flags} --output-dir {output_dir}"


def tune_length_penalty(
    folder: str | Path, data: ReleaseData, alphas: list[float], split: str = "valid", batch_size: int = 100
) -> dict[float, float]:
    """BLEU (`ReleaseData.valid_metric`) on `split` for each length penalty α: the paper chose its α = 0.6 "after
    experimentation on the development set" (§6.1), and a release on other data may do the same."""
    scores = {}
    for alpha in alphas:
        result = data.evaluate(folder, split, batch_size=batch_size, length_penalty=alpha)
        scores[alpha] = round((result.get("tokenized_bleu") or result["bleu"])["score"], 2)
    return scores


def set_length_penalty(folder: str | Path, alpha: float) -> None:
    """Make `alpha` the default length penalty of the model folder's `generation_config.json` (replaced whole)."""
    generation = GenerationConfig.from_pretrained(folder)
    generation.length_penalty = alpha
    with tempfile.TemporaryDirectory() as scratch, staged_file(Path(folder) / "generation_config.json") as staging:
        generation.save_pretrained(scratch)  # validates the config, and writes it as transformers does
        shutil.copyfile(Path(scratch) / "generation_config.json", staging)


def adopt_best_length_penalty(folder: str | Path, data: ReleaseData, alphas: list[float]) -> dict[float, float]:
    """Make the α that scores best on valid the folder's default (on a tie, the first listed); returns every score."""
    on_valid = tune_length_penalty(folder, data, alphas)
    best = max(on_valid, key=on_valid.get)
    set_length_penalty(folder, best)
    return on_valid


def training_summary(
    run_dir: str | Path,
    run_preset: dict,
    final_dir: str | Path,
    averaged: list[Path],
    hardware: str,
    status: str,
    train_hours: float | None = None,
    on_valid: dict[float, float] | None = None,
    valid_metric: str = "BLEU (tok)",
) -> dict:
    """The card's account of how the averaged model in `final_dir` was trained. Without `train_hours` the time runs
    from the tokenizer's file to the last averaged checkpoint, which overstates a run resumed after a pause."""
    run, final = Path(run_dir), Path(final_dir)
    trainer_state = averaged[-1] / "trainer_state.json"
    # the accelerate loop's checkpoints hold no trainer state: their step is in their name, their epochs unrecorded
    state = (
        json.loads(trainer_state.read_text())
        if trainer_state.is_file()
        else {"global_step": checkpoint_step(averaged[-1]), "epoch": None}
    )
    epochs = f" ({state['epoch']:.1f} epochs)" if state["epoch"] is not None else ""
    config = json.loads((final / "config.json").read_text())
    generation = json.loads((final / "generation_config.json").read_text())
    hours = (
        train_hours or (averaged[-1].stat().st_mtime - (run / "tokenizer" / "tokenizer.json").stat().st_mtime) / 3600
    )
    parameters = AutoModelForSeq2SeqLM.from_pretrained(final).num_parameters()
    tuning = ""
    if on_valid:
        tuning = (
            f" Length penalty α={generation['length_penalty']}, the best on valid ({valid_metric} "
            f"{', '.join(f'{alpha}: {bleu}' for alpha, bleu in on_valid.items())}); §6.1 chose its α on the "
            f"development set too."
        )
    return {
        "status": status,
        "summary": (
            f"{parameters:,} parameters; {state['global_step']} updates{epochs} in "
            f"{hours:.1f} h wall-clock on {hardware}; the average of checkpoints "
            f"{', '.join(str(checkpoint_step(path)) for path in averaged)}.{tuning}"
        ),
        "parameters": parameters,
        "updates": state["global_step"],
        "epochs": round(state["epoch"], 2) if state["epoch"] is not None else None,
        "wall_clock_hours": round(hours, 2),
        "hardware": hardware,
        "averaged_checkpoints": [path.name for path in averaged],
        "valid_metric": valid_metric,
        "bleu_on_valid_by_length_penalty": {str(alpha): bleu for alpha, bleu in (on_valid or {}).items()},
        "hyperparameters": training_hyperparameters(config, run_preset, generation),
    }


def evaluate_release(folder: str | Path, data: ReleaseData, batch_size: int = 100) -> tuple[dict, list[dict]]:
    """Scores of the folder on each test split, plus those of the first `SMOKE_SENTENCES` translations of the first;
    and every `EXAMPLE_EVERY`th sentence of the first with its reference and translation, for the card."""
    first = data.test_splits[0]
    with tempfile.TemporaryDirectory() as scratch:
        results = {
            split: data.evaluate(folder, split, batch_size=batch_size, output_hypotheses=Path(scratch) / f"{split}.hyp")
            for split in data.test_splits
        }
        hypotheses = read_lines(Path(scratch) / f"{first}.hyp")
    sources, references = data.pairs(first)
    lowercase = lowercases(AutoTokenizer.from_pretrained(folder))
    results[f"{first}[:{SMOKE_SENTENCES}]"] = score_translations(
        hypotheses[:SMOKE_SENTENCES], references[:SMOKE_SENTENCES], lang=data.target_lang, lowercase=lowercase
    )
    examples = [
        {"source": sources[i], "reference": references[i], "translation": hypotheses[i]}
        for i in range(0, len(sources), EXAMPLE_EVERY)
    ]
    return results, examples


def _summary(scores: dict) -> dict:
    metrics = {"sacrebleu": "bleu", "chrf": "chrf", "tokenized_bleu": "tokenized_bleu"}
    summary = {key: round(scores[metric]["score"], 2) for key, metric in metrics.items() if scores.get(metric)}
    return summary | {"signature": scores["bleu"]["signature"]}


def write_release(
    final_dir: str | Path,
    release_dir: str | Path,
    results: dict,
    training: dict,
    run_preset: dict,
    release_flags: str = "",
    overwrite: bool = False,
    data: dict | None = None,
    examples: list[dict] | None = None,
) -> Path:
    """Copy the model folder, write `results.json` and the card (with the commands that reproduce the run and the
    release: `release_flags`) into a folder that replaces `release_dir` only whole; `data` is `ReleaseData.record()`."""
    release = Path(release_dir)
    check_not_an_input(release, [("the averaged model", final_dir)])
    check_output_folder(release, "release", overwrite)
    data = data or ReleaseData().record()
    run_dir = f"outputs/{release.name}"
    languages = language_flags(*data["languages"])
    if "file" in data:  # the card's reader has the file under its own name, not at this machine's path
        run_preset = run_preset | {"corpus": data["file"]}
    if "other_files" in data:  # scored on a --data-dir of other files than the official ones
        release_flags = f" --data-dir {data['other_files']['folder']}{release_flags}"
    reproduce = [
        train_command(run_preset, run_dir, *data["languages"]),
        f"vanilla-transformer release --run-dir {run_dir} --output-dir {release.name}{languages}" + release_flags,
    ]
    record = {
        "results": {split: _summary(scores) for split, scores in results.items()},
        "training": training,
        "data": data,
        "reproduce": reproduce,
    } | ({"examples": examples} if examples else {})
    if run_preset.get("run"):  # what the run recorded besides its preset: the reproduce line's flags come from it
        record["run"] = run_preset["run"]
    card = card_from_release_record(release.name, record)
    with staged_folder(release, "release", "release", overwrite) as staging:
        for item in Path(final_dir).iterdir():
            if item.is_file() and not item.name.startswith("."):  # not the model folder's marker
                shutil.copy2(item, staging / item.name)
        record_tokenizer_fingerprint(staging)
        (staging / "results.json").write_text(json.dumps(record, indent=2) + "\n")
        card.save(staging / "README.md")
    return release


def record_tokenizer_fingerprint(folder: str | Path) -> str:
    """Make `folder`'s config.json record the fingerprint of the tokenizer beside it, so that another tokenizer put
    there later is refused when it loads; one it records already must match. Returns the fingerprint."""
    config_path = Path(folder) / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    fingerprint = tokenizer_fingerprint(load_tokenizer(folder))
    recorded = config.get("tokenizer_fingerprint")
    if recorded not in (None, fingerprint):
        raise SettingsError(
            f"{config_path} records another tokenizer than the one beside it (fingerprint {recorded[:12]}… vs "
            f"{fingerprint[:12]}…): the model was trained with other token ids; put the run's own tokenizer there."
        )
    if recorded is None:
        config["tokenizer_fingerprint"] = fingerprint
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return fingerprint
