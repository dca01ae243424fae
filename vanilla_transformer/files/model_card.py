"""Model cards: `README.md` rendered from the package's Jinja2 template, its YAML metadata (license, languages, Hub
datasets, `model-index` results) written by `huggingface_hub.ModelCardData`, from a release's `results.json` or a
`Trainer` run's records."""

from importlib import resources
from pathlib import Path

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..data.multi30k import COMMIT as MULTI30K_COMMIT
from ..errors import VanillaTransformerError

# package data (pyproject.toml), so that an installed wheel renders cards as a checkout does
CARD_TEMPLATE = resources.files(__package__) / "templates" / "model_card.md"
# the tutorial, relative to model_cards/<name>/README.md in the source repository (the project has no public URL yet)
TUTORIAL_LINK = "../../docs/tutorial.ipynb"
LANGUAGE_NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "cs": "Czech",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
}
# The Hub datasets that hold a corpus we train on, for the card's `datasets` (no entry: no Hub dataset holds it, and
# the card names none). `bentrevett/multi30k` is the WMT16 release of Multi30k Task 1: its train and test splits are
# our train and test2016; its validation has the WMT16 val.de, which the official files corrected in 61 lines.
HUB_DATASETS = {"multi30k": "bentrevett/multi30k", "wmt14": "wmt/wmt14"}
# Weights inherit the terms of their training data: (license, license_name, license_link) for data with terms of its
# own; other data leaves the card's license to the caller (apache-2.0, the code's, by default).
DATA_TERMS = {
    "multi30k": ("other", "multi30k-non-commercial", "https://github.com/multi30k/dataset#use-of-the-data"),
    "tatoeba": ("cc-by-2.0", None, None),  # Tatoeba's sentences: CC-BY 2.0 France
}
DATASET_TITLES = {
    "multi30k": "Multi30k Task 1",
    "builtin-en-de-grammar": "the built-in English→German grammar corpus",
    "wmt14": "WMT 2014",
    "tatoeba": "Tatoeba",
}
EXAMPLES = {
    "en": "A man is riding a bike down the street.",
    "de": "Ein Mann fährt mit dem Fahrrad die Straße entlang.",
    "zh": "我今天在公园里看到了一只很大的狗。",
}
CONFIG_HYPERPARAMETERS = (
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "encoder_ffn_dim",
    "dropout",
    "vocab_size",
)
PRESET_HYPERPARAMETERS = ("max_tokens", "tokens_per_update", "warmup_steps", "lr_factor", "label_smoothing")


def dataset_id(corpus: str) -> str:
    """The name the card gives a training preset's `corpus`: a folder counts by its name (`multi30k`)."""
    if corpus == "builtin":
        return "builtin-en-de-grammar"
    if corpus.endswith(".txt") or Path(corpus).is_file():  # manythings.org's Anki files hold Tatoeba's sentences
        return "tatoeba"
    if corpus.startswith(("/", "./", "../", "~")) or Path(corpus).is_dir():
        return Path(corpus).name
    return corpus  # a `datasets` name (`wmt14`, `bentrevett/multi30k`) is already an id


def decoding_summary(generation: dict | None = None) -> str:
    """The decoding a `generation_config.json` sets, in a few words (the paper's §6.1 settings when not given)."""
    generation = generation or {}
    return (
        f"beam {generation.get('num_beams', 4)}, GNMT length penalty α={generation.get('length_penalty', 0.6)}, "
        f"at most input length + {generation.get('max_new_tokens_over_input', 50)} tokens"
    )


def training_hyperparameters(config: dict, preset: dict | None = None, generation: dict | None = None) -> dict:
    """The card's hyperparameter table, from `config.json`, the run's preset and `generation_config.json`."""
    table = {key: config[key] for key in CONFIG_HYPERPARAMETERS if key in config}
    table.update({key: preset[key] for key in PRESET_HYPERPARAMETERS if preset and key in preset})
    table["optimizer"] = "Adam(0.9, 0.98, 1e-9)"
    table["decoding"] = decoding_summary(generation)
    return table


# the paper's base recipe (§3, §5.1-5.4, §6.1) where a run may differ: field -> (the paper's value, as the card says it)
PAPER_RECIPE = {
    "dropout": (0.1, "0.1"),
    "warmup_steps": (4000, "4,000"),
    "lr_factor": (1.0, "1"),
    "tokens_per_update": (50_000, "~25,000 a side"),
    "d_model": (512, "512"),
    "encoder_layers": (6, "6"),
    "encoder_ffn_dim": (2048, "2,048"),
    "encoder_attention_heads": (8, "8"),
}


def recipe_changes(training: dict) -> list[str]:
    """How a run's recipe differs from the paper's base (`PAPER_RECIPE`, 5 checkpoints averaged), one phrase each."""
    values, averaged = training["hyperparameters"], len(training.get("averaged_checkpoints", []))
    changes = [
        f"{field} {values[field]:,} (paper: {said})"
        for field, (paper, said) in PAPER_RECIPE.items()
        if field in values and values[field] != paper
    ]
    return changes + ([f"average_last {averaged} (paper: 5)"] if averaged not in (0, 5) else [])


def render_model_card(
    name: str,
    results: dict[str, dict],
    training: dict,
    *,
    dataset: str = "multi30k",
    languages: tuple[str, str] = ("en", "de"),
    repo_id: str | None = None,
    license: str = "apache-2.0",  # noqa: A002  (the card's own field name)
    reproduce: list[str] | None = None,
    evaluated_during_training: bool = False,
    data: dict | None = None,
    examples: list[dict] | None = None,
) -> ModelCard:
    """The model card from the package's template. `results` maps a split to its scores (`sacrebleu`, `chrf`,
    optionally `tokenized_bleu` and `signature`); `training` holds `summary`, `hyperparameters` and optionally
    `status`; `data` is `release.ReleaseData.record()`; `examples` are translations to show (`source`, `reference`,
    `translation`)."""
    if not CARD_TEMPLATE.is_file():
        raise FileNotFoundError(
            f"the card template {CARD_TEMPLATE} is missing from this install: reinstall vanilla_transformer, or write "
            f"README.md yourself."
        )
    source, target = languages
    title = DATASET_TITLES.get(dataset, dataset)
    other_files = " (not the official files)" if (data or {}).get("other_files") else ""
    eval_results = []
    for split, scores in results.items():
        if "[" in split:  # a part scored for the smoke test (`test2016[:50]`), not a result
            continue
        metrics = [("sacrebleu", scores["sacrebleu"], "sacreBLEU"), ("chrf", scores["chrf"], "chrF")]
        if "tokenized_bleu" in scores:
            metrics.insert(0, ("bleu", scores["tokenized_bleu"], "BLEU (lowercased Moses-tokenized reference)"))
        eval_results += [
            EvalResult(
                task_type="translation",
                task_name=f"Translation {source.capitalize()}-{target.capitalize()}",
                dataset_type=dataset,
                dataset_name=f"{title[0].upper()}{title[1:]} {split}{other_files}",
                dataset_split=split,
                dataset_config=f"{source}-{target}",
                metric_type=metric,
                metric_value=value,
                metric_name=metric_name,
            )
            for metric, value, metric_name in metrics
        ]
    license_name = license_link = None
    if dataset in DATA_TERMS:
        license, license_name, license_link = DATA_TERMS[dataset]
    card_data = ModelCardData(
        language=[source, target],
        license=license,
        license_name=license_name,
        license_link=license_link,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "transformer", "attention-is-all-you-need", dataset],
        # none where no Hub dataset holds the data, rather than a name the Hub would link to nothing
        datasets=[HUB_DATASETS.get(dataset, dataset)] if dataset in HUB_DATASETS or "/" in dataset else None,
        metrics=sorted({result.metric_type for result in eval_results}),
        model_name=name,
        eval_results=eval_results or None,
    )
    rows = [{"split": split, "tokenized_bleu": "–"} | scores for split, scores in results.items()]
    signatures = [scores["signature"] for scores in results.values() if scores.get("signature")]
    bleu_tokenizer = next((part[4:] for part in (signatures or [""])[0].split("|") if part.startswith("tok:")), "13a")
    # trim_blocks/lstrip_blocks: the template's {% %} lines leave no blank lines; StrictUndefined: a misspelt
    # variable fails here instead of vanishing from the card
    environment = jinja2.Environment(
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined
    )
    template = environment.from_string(CARD_TEMPLATE.read_text())
    text = template.render(
        card_data=card_data.to_yaml(),
        name=name,
        repo_id=repo_id or f"your-name/{name}",  # where the folder is not pushed yet: the user's namespace
        dataset=dataset,
        dataset_title=title,
        multi30k_commit=MULTI30K_COMMIT[:7],  # the files `multi30k_dir` downloads
        source_language=LANGUAGE_NAMES.get(source, source),
        target_language=LANGUAGE_NAMES.get(target, target),
        example=EXAMPLES.get(source, EXAMPLES["en"]),
        status=training.get("status"),
        results=rows,
        has_tokenized_bleu=any("tokenized_bleu" in scores for scores in results.values()),
        evaluated_during_training=evaluated_during_training,
        signature=signatures[0] if signatures else None,
        training_summary=training["summary"],
        hyperparameters=training["hyperparameters"],
        recipe_changes=recipe_changes(training),
        decoding=training["hyperparameters"].get("decoding", decoding_summary()),
        reproduce=reproduce,
        bleu_tokenizer=bleu_tokenizer,
        data=data or {},
        examples=examples or [],
        tutorial_link=TUTORIAL_LINK,
    )
    return ModelCard(text)


def card_from_release_record(name: str, record: dict, repo_id: str | None = None) -> ModelCard:
    """The card of a release folder from its `results.json`: Multi30k en→de where the record names no data."""
    data = record.get("data", {"dataset": "multi30k", "languages": ["en", "de"]})
    return render_model_card(
        name,
        record["results"],
        record["training"],
        dataset=data["dataset"],
        languages=tuple(data["languages"]),
        repo_id=repo_id,
        reproduce=record.get("reproduce"),
        data=data,
        examples=record.get("examples"),
    )


def card_from_training_log(
    name: str,
    log_history: list[dict],
    config: dict,
    *,
    global_step: int,
    epoch: float,
    parameters: int,
    preset: dict | None = None,
    dataset: str,
    languages: tuple[str, str] = ("en", "de"),
    repo_id: str | None = None,
    license: str = "apache-2.0",  # noqa: A002
) -> ModelCard:
    """A card from a `Trainer` run's records, scored by the last evaluation's sacreBLEU and chrF on validation."""
    evaluations = [entry for entry in log_history if "eval_bleu" in entry]
    if not evaluations:
        raise VanillaTransformerError(
            f"the training log of {name} holds no evaluation (no `eval_bleu` entry) for the card's results: "
            f"evaluate before pushing (`trainer.evaluate()`) or write README.md."
        )
    last = evaluations[-1]
    split = (preset or {}).get("valid_split", "validation")
    results = {split: {"sacrebleu": round(last["eval_bleu"], 2), "chrf": round(last["eval_chrf"], 2)}}
    training = {
        "summary": (
            f"{parameters:,} parameters; {global_step} updates ({epoch:.1f} epochs); scores of the evaluation at "
            f"update {last.get('step', global_step)}."
        ),
        "hyperparameters": training_hyperparameters(config, preset),
    }
    return render_model_card(
        name,
        results,
        training,
        dataset=dataset,
        languages=languages,
        repo_id=repo_id,
        license=license,
        evaluated_during_training=True,
    )
