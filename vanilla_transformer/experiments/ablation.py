"""Table 3 of the paper (§6.2, "Model Variations"): a grid of variations of a training preset, each row a run trained by
the normal training code (`training.train`), evaluated as the paper evaluates the table (dev perplexity per
wordpiece, dev BLEU with beam search and no checkpoint averaging) plus test BLEU decoded once, and laid out beside
the paper's own numbers as Markdown, CSV and plots.

The grid is data: `table3_grid` scales the paper's rows (A)-(E) to the preset's model, with a pre-LN row (the question
the paper does not answer) and the base row under several seeds to show the noise; a JSON file gives a grid of one's
own (`load_grid`). Every row reads the grid's one tokenizer (`<output_dir>/tokenizer`); each row lives in
`<output_dir>/rows/<row>/` and is done when its `row.json` exists, so a killed grid resumes where it stopped (a
half-trained row resumes from its newest checkpoint).

A row's record (`row.json`) holds everything the table shows, so that the table can be rendered from records alone
(`table_from_records`): its scores (sacreBLEU; tokenized BLEU where the corpus folder has Multi30k's official `tok/`
references), its test hypotheses (decoded once) with their per-sentence BLEU statistics, and its dev curve and
training loss as the run logged them. From the records the table reports:

- Δ test BLEU of each row against the base row with a 95% confidence interval by paired bootstrap over the test
  sentences (`paired_bootstrap`), and the paper's Δ beside it with whether the two agree (`agreement`);
- with `seeds` > 1, the base row under that many seeds and then every row within 2 BLEU of the base's mean as well
  (`reseed_rows`: where a difference is small, one seed cannot tell it), as mean ± sd;
- with `GridSettings.lr_factors`, the learning rate chosen once on the base row's dev BLEU (`choose_lr_factor`), as
  the paper tuned its recipe on the base model and kept it for every row;
- rows still rising at the end of training or diverged (`curve_status`), with every row's curve in
  `table3_curves.png`.

Records travel: a `RecordFolder` (`--records DIR`, meant to be kept in the repository) holds every finished row's
record beside the grid's settings; a later run with the same settings trains only the rows it lacks, and one with
other settings is refused, so that records of two recipes never mix in one table.
"""

import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields, replace
from multiprocessing import get_context
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import DataError, OutputError
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..training.presets import TrainingPreset
from .table3 import choose_lr_factor, write_table

# the preset fields a row may change; every other name must be a field of the model's config
TRAINING_FIELDS = ("dropout", "label_smoothing", "lr_factor")

# rows whose seed-0 test or dev BLEU lies within this many BLEU of the base's mean get the base's seeds (issue 48)
SEED_WINDOW = 2.0


@dataclass(frozen=True)
class AblationRow:
    """One row: a name, its group ("base", "A" … "E", "LN", or a grid file's own), the fields it changes (model
    config fields, or `dropout` / `label_smoothing` of the training preset) and its seed."""

    name: str
    group: str
    changes: tuple[tuple[str, object], ...] = ()
    seed: int = 0

    @property
    def folder_name(self) -> str:
        return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in self.name)

    def describe(self) -> str:
        return ", ".join(f"{field}={value}" for field, value in self.changes) or "(the preset's model)"


def table3_grid(preset: TrainingPreset, seeds: int = 1) -> list[AblationRow]:
    """The paper's Table 3 rows scaled to `preset`'s model. The paper's base model has h=8, N=6, d_k=64, so (A) takes
    1, h/2, 2h and 4h heads at constant h·d_k = d_model (row names give the factor: "A h=1/2" is h/2 heads), (B)
    d_k/4 and d_k/2 with d_v unchanged, (C) N·2/6, 4/6, 8/6 (rounded), d_model/2 and 2·d_model (heads unchanged, so
    d_k follows), d_ff/2 and 2·d_ff, (D) no dropout, dropout + 0.1, no label smoothing and ε_ls = 0.2, (E) learned
    positions; then pre-LN, and the base row under `seeds` seeds (0, 1, …). On the paper's base model these are the
    paper's own values. Rows whose sizes would not be whole numbers are left out."""
    config = preset.model_config()
    d_model, heads, layers = config.d_model, config.encoder_attention_heads, config.encoder_layers
    d_k = d_model // heads
    dropout = config.dropout
    rows = [AblationRow("base", "base")] + [AblationRow(f"base seed {s}", "base", seed=s) for s in range(1, seeds)]

    def add(name: str, group: str, **changes) -> None:
        if all(v > 0 and float(v).is_integer() for k, v in changes.items() if k not in TRAINING_FIELDS):
            rows.append(
                AblationRow(
                    name, group, tuple((k, int(v) if k not in TRAINING_FIELDS else v) for k, v in changes.items())
                )
            )

    for label, ratio in (("1", None), ("1/2", 0.5), ("2", 2), ("4", 4)):
        h = 1 if ratio is None else heads * ratio
        if float(h).is_integer() and d_model % h == 0:
            add(f"A h={label}", "A", encoder_attention_heads=h, decoder_attention_heads=h)
    add("B d_k=1/4", "B", qk_head_dim=d_k / 4)
    add("B d_k=1/2", "B", qk_head_dim=d_k / 2)
    for label, paper_layers in (("1/3", 2), ("2/3", 4), ("4/3", 8)):
        n = max(1, round(layers * paper_layers / 6))
        add(f"C N={label}", "C", encoder_layers=n, decoder_layers=n)
    add("C d_model=1/2", "C", d_model=d_model / 2)
    add("C d_model=2", "C", d_model=d_model * 2)
    add("C d_ff=1/2", "C", encoder_ffn_dim=config.encoder_ffn_dim / 2, decoder_ffn_dim=config.decoder_ffn_dim / 2)
    add("C d_ff=2", "C", encoder_ffn_dim=config.encoder_ffn_dim * 2, decoder_ffn_dim=config.decoder_ffn_dim * 2)
    add("D P_drop=0", "D", dropout=0.0)
    add("D P_drop+0.1", "D", dropout=round(dropout + 0.1, 4))
    add("D ε_ls=0", "D", label_smoothing=0.0)
    add("D ε_ls=0.2", "D", label_smoothing=0.2)
    rows.append(AblationRow("E learned positions", "E", (("position_encoding", "learned"),)))
    rows.append(AblationRow("pre-LN", "LN", (("normalize_before", True),)))
    return rows


# what a grid file's row may hold: its key, the JSON type, and that type as the message names it
ROW_KEYS = {
    "name": (str, "a string"),
    "group": (str, "a string"),
    "changes": (dict, "an object"),
    "seed": (int, "an integer"),
}


def load_grid(path: str | Path) -> list[AblationRow]:
    """A grid from a JSON file: a list of `{"name": ..., "changes": {field: value, ...}}`, optionally with `"group"`
    and `"seed"`; the row named `base` (with no changes) is added first when the file has none. A row with another
    key (a misspelt `"changes"` would train the base model under the row's name), a value of the wrong type or no
    changes (other than `base`) is refused, naming the row."""
    try:
        entries = json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"the grid file {path} is not JSON ({error}); write a list of rows.") from error
    example = '{"name": "h=16", "changes": {"encoder_attention_heads": 16, "decoder_attention_heads": 16}}'
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "name" in e for e in entries):
        raise DataError(f"the grid file {path} must hold a list of rows like {example}.")
    for number, entry in enumerate(entries, start=1):
        unknown = sorted(set(entry) - set(ROW_KEYS))
        wrong = [
            f"{key!r} must be {described}"
            for key, (kind, described) in ROW_KEYS.items()
            if key in entry and (not isinstance(entry[key], kind) or isinstance(entry[key], bool))
        ]
        unchanged = entry.get("name") != "base" and not entry.get("changes")
        if unknown or wrong or unchanged:
            problems = [f"unknown key(s) {unknown} (a row has {', '.join(ROW_KEYS)})"] if unknown else []
            problems += wrong + (["no changes: it would train the base model under another name"] * unchanged)
            raise DataError(f"the grid file {path}, row {number} ({entry.get('name')!r}): {'; '.join(problems)}.")
    rows = [
        AblationRow(e["name"], e.get("group", e["name"]), tuple(e.get("changes", {}).items()), e.get("seed", 0))
        for e in entries
    ]
    if not any(row.name == "base" for row in rows):
        rows.insert(0, AblationRow("base", "base"))
    return rows


def check_grid(preset: TrainingPreset, rows: list[AblationRow]) -> None:
    """Refuse, before anything trains, a grid with a repeated row name, an unknown field, or a model it cannot
    build (the config's own validation names the field and the fix)."""
    names = [row.folder_name for row in rows]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DataError(f"the grid names rows {repeated} more than once; give every row its own name.")
    config_fields = {f.name for f in fields(VanillaTransformerConfig)}
    for row in rows:
        unknown = [field for field, _ in row.changes if field not in config_fields | set(TRAINING_FIELDS)]
        if unknown:
            raise DataError(
                f"row {row.name!r} changes {unknown}, which are neither fields of the model's config nor of "
                f"{TRAINING_FIELDS}; see VanillaTransformerConfig for the model's fields."
            )
        row_preset(preset, row).model_config()


def row_preset(preset: TrainingPreset, row: AblationRow) -> TrainingPreset:
    """`preset` with the row's changes and no checkpoint averaging (Table 3 is read off single models, §6.2)."""
    model = dict(preset.model_overrides)
    training = {}
    for field, value in row.changes:
        if field in TRAINING_FIELDS:
            training[field] = value
        else:
            model[field] = value
    return replace(preset, model_overrides=tuple(model.items()), average_last=1, **training)


@torch.inference_mode()
def dev_perplexity(model, tokenizer, sources: list[str], targets: list[str], batch_size: int = 64) -> float:
    """Perplexity per target wordpiece (the closing </s> included) under teacher forcing, without label smoothing:
    exp of the summed cross-entropy over the target tokens."""
    total, tokens = 0.0, 0
    for start in range(0, len(sources), batch_size):
        batch = tokenizer(sources[start : start + batch_size], return_tensors="pt", padding=True).to(model.device)
        target = tokenizer(text_target=targets[start : start + batch_size], return_tensors="pt", padding=True)
        labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, -100).to(model.device)
        # decoder inputs, not labels: the model's own (mean) loss is not needed beside this sum
        decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
        logits = model(**batch, decoder_input_ids=decoder_input_ids).logits
        total += float(F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="sum"))
        tokens += int((labels != -100).sum())
    mean = float(total) / tokens
    return math.inf if mean > 700 else math.exp(mean)  # a diverged row's, where exp would overflow


@dataclass(frozen=True)
class GridSettings:
    """What every row shares besides the preset: the languages, the splits it reports, how it runs, and the
    learning-rate factors to choose from on the base row (empty: the preset's `lr_factor`)."""

    source_lang: str = "en"
    target_lang: str = "de"
    test_split: str = "test"
    eval_samples: int | None = None  # score the first N pairs of dev and test only (a quick look, not the table)
    threads: int | None = None
    lr_factors: tuple[float, ...] = ()


GRID_RECORD = "ablation.json"


def grid_settings(preset: TrainingPreset, settings: GridSettings) -> dict:
    """The grid's settings as `ablation.json` records them, in the output folder and in a records folder: the preset
    and the settings, without the thread count (it changes no result). With `lr_factors` the preset's `lr_factor` is
    None: the sweep on the base row chooses it."""
    preset_fields = preset.as_dict()
    if settings.lr_factors:
        preset_fields["lr_factor"] = None
    return json.loads(json.dumps({"preset": preset_fields, "settings": {**asdict(settings), "threads": None}}))


def settings_differ(wanted: dict, recorded: dict) -> list[str]:
    """The fields (`preset.max_steps`, `settings.test_split`, …) in which two grids' settings differ; a setting added
    since `recorded` was written counts as its default there, so that an older grid still resumes."""
    defaults = {"preset": {}, "settings": json.loads(json.dumps({**asdict(GridSettings()), "threads": None}))}
    return sorted(
        f"{part}.{key}"
        for part in ("preset", "settings")
        for key in set(wanted[part]) | set(recorded.get(part, {}))
        if wanted[part].get(key, defaults[part].get(key)) != recorded.get(part, {}).get(key, defaults[part].get(key))
    )


def check_output_folder(output_dir: str | Path, preset: TrainingPreset, settings: GridSettings) -> None:
    """Make `output_dir` a grid's folder, or accept it as the same grid's: a folder with another preset or other
    settings in its `ablation.json` is refused (its rows would not compare), and so is a non-empty folder without
    one (nothing of ours to resume; nothing of someone else's is written over)."""
    folder = Path(output_dir)
    record = folder / GRID_RECORD
    wanted = grid_settings(preset, settings)
    if record.is_file():
        differ = settings_differ(wanted, json.loads(record.read_text()))
        if differ:
            raise OutputError(
                f"--output-dir {folder} holds a grid run with other settings ({', '.join(differ)} differ): its rows "
                f"would not compare with new ones; give the flags it was started with, or another --output-dir."
            )
        return
    if folder.is_dir() and any(folder.iterdir()):
        raise OutputError(
            f"--output-dir {folder} is not empty and holds no grid of ours (no {GRID_RECORD}); give a new or empty "
            f"folder."
        )
    folder.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(wanted, indent=2) + "\n")


def _plain(value: object) -> object:
    """`value` as it reads back from JSON (tuples as lists), with NaN and infinities as None: a record is strict
    JSON, and a diverged row's non-finite numbers are missing values, not numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def record_text(record: dict) -> str:
    """A record as strict JSON with one key per line and one item per line of a list (a hypothesis, a sentence's
    statistics, a point of a curve), so that a diff of two versions of a record shows what changed line by line."""

    def dump(value: object) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    lines = []
    for key, value in _plain(record).items():
        if isinstance(value, list) and value:
            items = ",\n".join(f"    {dump(item)}" for item in value)
            lines.append(f"  {dump(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {dump(key)}: {dump(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def row_of(record: dict) -> AblationRow:
    """The row a record was trained for."""
    row = record["row"]
    return AblationRow(row["name"], row["group"], tuple(tuple(change) for change in row["changes"]), row["seed"])


class RecordFolder:
    """A grid's records kept for good (`--records DIR`, e.g. docs/table3/records in the repository, so that a later
    GPU run trains only the rows still missing): `ablation.json`, the grid's settings as the output folder's
    `ablation.json` holds them (`grid_settings`; here also the rows' order and the learning-rate choice), and
    `rows/<row>.json`, one finished row's record each, written whole (`write_text_atomic`). A folder holding records of
    other settings is refused, naming the settings that differ, so that records of two recipes never mix."""

    def __init__(self, folder: str | Path, grid: dict | None = None):
        """Open `folder` for a grid whose settings are `grid`, creating it when new; with `grid=None`, open an
        existing records folder to read (`table_from_records`)."""
        from ..files.outputs import write_text_atomic

        self.folder = Path(folder)
        self.index_path = self.folder / GRID_RECORD
        if self.index_path.is_file():
            differ = [] if grid is None else settings_differ(grid, self.index())
            if differ:
                raise OutputError(
                    f"--records {self.folder} holds the records of a grid with other settings ({', '.join(differ)} "
                    f"differ): rows of two recipes would mix in one table; give the flags those rows were trained "
                    f"with, or another --records folder."
                )
        elif grid is None:
            raise DataError(f"--records {self.folder} holds no grid's records (no {GRID_RECORD}); check the path.")
        elif self.folder.is_dir() and any(self.folder.iterdir()):
            raise OutputError(
                f"--records {self.folder} is not empty and holds no records of ours (no {GRID_RECORD}); give a new "
                f"or empty folder."
            )
        else:
            write_text_atomic(self.index_path, json.dumps(grid, indent=2, ensure_ascii=False) + "\n", "--records")

    def index(self) -> dict:
        return json.loads(self.index_path.read_text())

    def path(self, row: AblationRow) -> Path:
        return self.folder / "rows" / f"{row.folder_name}.json"

    def get(self, row: AblationRow, lr_factor: float) -> dict | None:
        """The kept record of `row` trained at `lr_factor`, or None when there is none. A record whose row changes
        other fields than the grid's row of that name, or that was trained at another learning rate (another choice
        of the sweep), is refused: it would stand in the table for a row it is not."""
        path = self.path(row)
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        if record.get("row") != _plain(asdict(row)):
            raise OutputError(
                f"{path} is the record of the row {record.get('row')}, but the grid's row of that name is "
                f"{_plain(asdict(row))}; rename the grid's row, or move the record away to train it again."
            )
        if record.get("lr_factor") != lr_factor:
            raise OutputError(
                f"{path} was trained at lr_factor {record.get('lr_factor')}, but this grid trains {row.name!r} at "
                f"{lr_factor}; records of two learning rates would mix: give another --records folder."
            )
        return record

    def keep(self, record: dict) -> Path:
        from ..files.outputs import write_text_atomic

        return write_text_atomic(self.path(row_of(record)), record_text(record), "--records")

    def note(self, **entries: object) -> None:
        """Add `entries` to `ablation.json` (the settings it holds stay as they are)."""
        from ..files.outputs import write_text_atomic

        index = self.index() | _plain(entries)
        write_text_atomic(self.index_path, json.dumps(index, indent=2, ensure_ascii=False) + "\n", "--records")

    def note_lr_choice(self, sweep: dict) -> None:
        """Record the learning-rate sweep; a choice other than the one recorded is refused (its rows would mix)."""
        recorded = self.index().get("lr_sweep")
        if recorded and recorded.get("chosen") != sweep["chosen"]:
            raise OutputError(
                f"--records {self.folder} holds rows trained at the lr_factor {recorded.get('chosen')} chosen "
                f"before, but the sweep now chooses {sweep['chosen']}; give another --records folder."
            )
        self.note(lr_sweep=sweep)

    def records(self) -> list[dict]:
        """Every kept record, in the order the grid last listed them (`ablation.json`'s `rows`), then by name."""
        order = {name: position for position, name in enumerate(self.index().get("rows", []))}
        records = [json.loads(path.read_text()) for path in sorted((self.folder / "rows").glob("*.json"))]
        return sorted(records, key=lambda record: order.get(record["row"]["name"], len(order)))


def tokenized_references(corpus: str, split: str, source_lang: str, target_lang: str) -> list[str] | None:
    """The official lowercased, Moses-tokenized references of `split`, `tok/{split}.lc.norm.tok.{target_lang}`, where
    the corpus is a folder of Multi30k's layout that has them (`multi30k.multi30k_dir` for `"multi30k"`); None for
    any other corpus. The split is found as `load_corpus` finds it ("valid" also finds "validation")."""
    from ..data.corpora import find_split
    from ..data.multi30k import MULTI30K, multi30k_dir
    from ..data.text import read_lines

    if corpus == MULTI30K:
        folder = multi30k_dir(languages=(source_lang, target_lang))
    elif Path(corpus).expanduser().is_dir():
        folder = Path(corpus).expanduser()
    else:
        return None
    try:
        split = find_split(split, sorted(path.stem for path in folder.glob(f"*.{source_lang}")), corpus)
    except DataError:
        return None
    path = folder / "tok" / f"{split}.lc.norm.tok.{target_lang}"
    return read_lines(path) if path.is_file() else None


def bleu_statistics(
    hypotheses: list[str], references: list[str], lang: str = "de", lowercase: bool = False
) -> list[list[int]]:
    """Each sentence's sufficient statistics of sacreBLEU's corpus BLEU as `score_translations` computes it:
    `[hypothesis length, reference length, 1- to 4-gram matches, 1- to 4-gram totals]`. Summed over any subset of the
    sentences they give that subset's corpus BLEU (`bleu_from_statistics`), which is what a bootstrap resample
    needs; kept in a row's record, they let the table resample without the references."""
    from sacrebleu.metrics import BLEU

    from ..inference.scoring import sacrebleu_options

    bleu = BLEU(lowercase=lowercase, **sacrebleu_options(lang))
    statistics_ = []
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        score = bleu.corpus_score([hypothesis], [[reference]])
        statistics_.append([score.sys_len, score.ref_len, *score.counts, *score.totals])
    return statistics_


def score_split(model, tokenizer, preset: TrainingPreset, split: str, settings: GridSettings) -> dict:
    """Translate `split` once with the model's generation config and score it: sacreBLEU and, where the corpus has
    the official tokenized references, tokenized BLEU (`score_translations`), with the hypotheses, their per-sentence
    BLEU statistics (`bleu_statistics`), and the sources and references (for the perplexity)."""
    from ..data.corpora import load_corpus, sides
    from ..data.tokenization import lowercases
    from ..inference.scoring import score_translations
    from ..inference.translation import translate

    source_lang, target_lang = settings.source_lang, settings.target_lang
    corpus = load_corpus(preset.corpus, split, source_lang, target_lang, preset.dataset_config)
    tokenized = tokenized_references(preset.corpus, split, source_lang, target_lang)
    if settings.eval_samples:
        corpus = corpus.select(range(min(settings.eval_samples, len(corpus))))
        tokenized = tokenized[: len(corpus)] if tokenized is not None else None
    sources, references = sides(corpus, source_lang, target_lang)
    hypotheses = translate(model, tokenizer, sources)
    lowercase = lowercases(tokenizer)  # a lowercasing model is scored case-insensitively, as `evaluate` does
    scores = score_translations(hypotheses, references, tokenized, lang=target_lang, lowercase=lowercase)
    return {
        "bleu": scores["bleu"]["score"],
        "signature": scores["bleu"]["signature"],
        "tokenized_bleu": scores["tokenized_bleu"]["score"] if tokenized is not None else None,
        "hypotheses": hypotheses,
        "statistics": bleu_statistics(hypotheses, references, target_lang, lowercase),
        "sources": sources,
        "references": references,
    }


def dev_curve(log_history: list[dict]) -> list[dict]:
    """The dev evaluations the run logged (`TrainingRun.log_history`; greedy decoding, `eval_steps` apart): step,
    dev BLEU and dev loss (None where not finite). Only what training logged: none is added, as an evaluation would
    change nothing of the training but its time."""
    return [
        {"step": entry["step"], "bleu": _plain(entry["eval_bleu"]), "loss": _plain(entry.get("eval_loss"))}
        for entry in log_history
        if "eval_bleu" in entry
    ]


def train_loss_curve(log_history: list[dict]) -> list[list]:
    """`[step, training loss]` of each logged training step (None where the loss was not finite)."""
    return [[entry["step"], _plain(float(entry["loss"]))] for entry in log_history if "loss" in entry]


def run_row(
    preset: TrainingPreset, row: AblationRow, folder: Path, settings: GridSettings, tokenizer_path: Path | None = None
) -> dict:
    """Train the row into `folder` (resuming a run left there), then measure it: dev perplexity, dev and test BLEU
    with the paper's decoding (beam 4, α = 0.6, input + 50) and tokenized BLEU where the corpus has the official
    tokenized references, parameters, updates, wall time; the test hypotheses (decoded once) with their per-sentence
    BLEU statistics, and the dev curve and training loss as logged. The record is written to `folder/row.json` last,
    whole: a row with that file is done."""
    from ..files.loading import load_model_and_tokenizer
    from ..files.outputs import write_text_atomic
    from ..training.run import train
    from ..training.settings import TrainingSettings

    record_path = folder / "row.json"
    if record_path.is_file():
        return json.loads(record_path.read_text())
    start = time.perf_counter()
    trained = row_preset(preset, row)
    run = train(
        TrainingSettings(
            trained,
            folder,
            settings.source_lang,
            settings.target_lang,
            seed=row.seed,
            report_to="none",
            progress=False,
            tokenizer_path=tokenizer_path,
            threads=settings.threads,  # train sets them for this process, the evaluation below included
        )
    )
    model, tokenizer = load_model_and_tokenizer(run.final_dir)
    model.generation_config.length_penalty = 0.6  # §6.1's α: the paper tuned α once, not per row
    dev = score_split(model, tokenizer, trained, trained.valid_split, settings)
    test = score_split(model, tokenizer, trained, settings.test_split, settings)
    record = {
        "row": asdict(row),
        "changes": row.describe(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_steps": trained.max_steps,
        "tokens_per_update": trained.tokens_per_update,
        "lr_factor": trained.lr_factor,
        "dev_perplexity": dev_perplexity(model, tokenizer, dev["sources"], dev["references"]),
        "dev_bleu": dev["bleu"],
        "test_bleu": test["bleu"],
        "dev_tokenized_bleu": dev["tokenized_bleu"],
        "test_tokenized_bleu": test["tokenized_bleu"],
        "bleu_signature": test["signature"],
        "test_split": settings.test_split,
        "test_sentences": len(test["hypotheses"]),
        "wall_seconds": time.perf_counter() - start,  # of this start: a resumed row counts only what it added
        "dev_curve": dev_curve(run.log_history),
        "train_loss": train_loss_curve(run.log_history),
        "test_hypotheses": test["hypotheses"],
        "test_bleu_statistics": test["statistics"],
    }
    write_text_atomic(record_path, record_text(record), "row.json")
    return json.loads(record_text(record))


def prepare_grid(preset: TrainingPreset, output_dir: Path, settings: GridSettings) -> Path:
    """The grid's one tokenizer, `<output_dir>/tokenizer` (the joint BPE the preset's training would learn, kept for
    a resume), and the training and dev pairs tokenized with it into the tokenized-corpus cache, both before any row
    trains (`training.prepare_run_data`, as a run of the preset does it): every row then reads the same wordpieces
    and opens the same tokenized files, so that all rows, the base row included, can start at once without each
    tokenizing the corpus again."""
    from accelerate import PartialState

    from ..training.run import prepare_run_data
    from ..training.settings import TrainingSettings

    state = PartialState(cpu=not torch.cuda.is_available())  # the state `train` makes in this process
    prepare_run_data(state, TrainingSettings(preset, output_dir, settings.source_lang, settings.target_lang))
    return output_dir / "tokenizer"


def lr_sweep_rows(factors: tuple[float, ...] | list[float]) -> list[AblationRow]:
    """The base row (seed 0) at each learning-rate factor of the sweep (§5.3's rate times the factor)."""
    return [AblationRow(f"base lr_factor={factor:g}", "lr", (("lr_factor", float(factor)),)) for factor in factors]


def with_base_seeds(rows: list[AblationRow], seeds: int) -> list[AblationRow]:
    """`rows` with the base row under seeds 0 … `seeds` - 1 (`base seed 1`, …, after the base rows), for a grid file
    that lists fewer (the built-in grid has them already)."""
    have = {row.seed for row in rows if row.group == "base"}
    extra = [AblationRow(f"base seed {seed}", "base", seed=seed) for seed in range(1, seeds) if seed not in have]
    after = max((number for number, row in enumerate(rows) if row.group == "base"), default=-1) + 1
    return rows[:after] + extra + rows[after:]


def reseed_rows(rows: list[AblationRow], records: dict[str, dict], seeds: int) -> list[AblationRow]:
    """The second wave: seeds 1 … `seeds` - 1 of every row (seed 0, not the base) whose test or dev BLEU lies within
    `SEED_WINDOW` BLEU of the base row's mean over its seeds. Where a row is that close to the base, one seed cannot
    tell its difference from the noise; a row far from it needs no more (issue 48)."""
    base = [records[row.name] for row in rows if row.group == "base"]
    if seeds < 2 or not base:
        return []
    means = {key: statistics.mean(record[key] for record in base) for key in ("test_bleu", "dev_bleu")}
    names = {row.name for row in rows}
    extra = []
    for row in rows:
        if row.group in ("base", "lr") or row.seed != 0:
            continue
        record = records[row.name]
        if any(abs(record[key] - mean) < SEED_WINDOW for key, mean in means.items()):
            extra += [
                AblationRow(f"{row.name} seed {seed}", row.group, row.changes, seed)
                for seed in range(1, seeds)
                if f"{row.name} seed {seed}" not in names
            ]
    return extra


class _GridRun:
    """One start of a grid: the rows' records as they come, from the records folder, from the output folder's
    `row.json`, or trained (`jobs` rows at once, each in a process of its own, all with the grid's tokenizer, which
    is prepared only when a row has to train)."""

    def __init__(self, output_dir: Path, settings: GridSettings, jobs: int, log, kept: RecordFolder | None):
        self.output_dir, self.settings, self.jobs, self.log, self.kept = output_dir, settings, jobs, log, kept
        self.records: dict[str, dict] = {}
        self.tokenizer_path: Path | None = None

    def folder(self, row: AblationRow) -> Path:
        return self.output_dir / "rows" / row.folder_name

    def finished(self, row: AblationRow, record: dict, origin: str = "", keep: bool = True) -> None:
        if self.kept is not None and keep:
            self.kept.keep(record)  # at once: a run killed later keeps every row finished so far
        self.records[row.name] = record
        self.log(f"{row.name}: done{origin}")

    def run(self, preset: TrainingPreset, rows: list[AblationRow]) -> None:
        todo = []
        for row in rows:
            if row.name in self.records:
                continue
            kept = self.kept.get(row, row_preset(preset, row).lr_factor) if self.kept is not None else None
            if kept is not None:
                self.finished(row, kept, f" (kept in {self.kept.folder})", keep=False)
            else:
                todo.append(row)
        if any(not (self.folder(row) / "row.json").is_file() for row in todo) and self.tokenizer_path is None:
            self.tokenizer_path = prepare_grid(preset, self.output_dir, self.settings)
        if self.jobs > 1 and len(todo) > 1:
            with ProcessPoolExecutor(min(self.jobs, len(todo)), mp_context=get_context("spawn")) as pool:
                futures = {
                    pool.submit(run_row, preset, row, self.folder(row), self.settings, self.tokenizer_path): row
                    for row in todo
                }
                for future in as_completed(futures):
                    self.finished(futures[future], future.result())
        else:
            for row in todo:
                self.finished(row, run_row(preset, row, self.folder(row), self.settings, self.tokenizer_path))


def run_grid(
    preset: TrainingPreset,
    rows: list[AblationRow],
    output_dir: str | Path,
    settings: GridSettings,
    jobs: int = 1,
    log=print,
    records_dir: str | Path | None = None,
    seeds: int = 1,
) -> list[dict]:
    """Run every row not yet done and write the table (`write_table`); returns the records, the sweep's first.

    In order: with `settings.lr_factors`, the base row (seed 0) at each factor, the best on dev BLEU chosen for
    every row (`choose_lr_factor`; the chosen run is the base row); the grid's rows, with the base row under `seeds`
    seeds; then the second wave, `seeds` seeds of every row close to the base (`reseed_rows`). With `records_dir`
    (a `RecordFolder`) every row whose record is kept there is done (neither trained nor tokenized for), and every
    row that finishes is kept there at once."""
    rows = with_base_seeds(rows, seeds)
    check_grid(preset, rows)
    output_dir = Path(output_dir)
    kept = RecordFolder(records_dir, grid_settings(preset, settings)) if records_dir is not None else None
    grid = _GridRun(output_dir, settings, jobs, log, kept)
    sweep = lr_sweep_rows(settings.lr_factors)
    if sweep:
        check_grid(preset, sweep + rows)
        grid.run(preset, sweep)
        chosen = choose_lr_factor([grid.records[row.name] for row in sweep])
        results = {f"{row.changes[0][1]:g}": grid.records[row.name]["dev_bleu"] for row in sweep}
        if kept is not None:
            kept.note_lr_choice({"factors": list(settings.lr_factors), "dev_bleu": results, "chosen": chosen})
        log(f"learning-rate factor {chosen:g} chosen on the base row's dev BLEU ({results})")
        preset = replace(preset, lr_factor=chosen)
        base = next(row for row in rows if row.name == "base")
        if kept is None or kept.get(base, chosen) is None:
            # the sweep's run at the chosen factor is the base row: the same training, so it is not trained again
            chosen_row = next(row for row in sweep if grid.records[row.name]["lr_factor"] == chosen)
            record = {**grid.records[chosen_row.name], "row": asdict(base), "changes": base.describe()}
            record = json.loads(record_text(record | {"lr_sweep_row": chosen_row.name}))
            if not (grid.folder(base) / "row.json").is_file():  # the output folder resumes without --records too
                from ..files.outputs import write_text_atomic

                write_text_atomic(grid.folder(base) / "row.json", record_text(record), "row.json")
            grid.finished(base, record, f" (the sweep's run at lr_factor={chosen:g})")
    grid.run(preset, rows)
    second = reseed_rows(rows, grid.records, seeds)
    if second:
        log(f"second wave: {seeds} seeds of {len(second) // (seeds - 1)} row(s) within {SEED_WINDOW} BLEU of the base")
        check_grid(preset, rows + second)
        grid.run(preset, second)
    ordered = [grid.records[row.name] for row in sweep + rows + second]
    if kept is not None:
        kept.note(rows=[row.name for row in sweep + rows + second])
    write_table(ordered, output_dir)
    return ordered


def table_from_records(records_dir: str | Path, output_dir: str | Path) -> dict[str, Path]:
    """The table, CSV and plots of the records kept in `records_dir` (a `RecordFolder`), written into `output_dir`:
    everything the table shows comes from the records, so a table can be rendered again without the runs."""
    records = RecordFolder(records_dir).records()
    if not records:
        raise DataError(f"--records {records_dir} holds no row's record yet; run the grid with --records first.")
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    return write_table(records, Path(output_dir))
