"""Table 3 of the paper (§6.2, "Model Variations"): a grid of variations of a training preset, each row a run trained by
the normal training code (`training.train`), evaluated as the paper evaluates the table (dev perplexity per
wordpiece, dev BLEU with beam search and no checkpoint averaging) plus test BLEU decoded once, and laid out beside
the paper's own numbers as Markdown, CSV and a plot.

The grid is data: `table3_grid` scales the paper's rows (A)-(E) to the preset's model, with a pre-LN row (the question
the paper does not answer) and the base row under several seeds to show the noise; a JSON file gives a grid of one's
own (`load_grid`). Every row reads the grid's one tokenizer (`<output_dir>/tokenizer`); each row lives in
`<output_dir>/rows/<row>/` and is done when its `row.json` exists, so a killed grid resumes where it stopped (a
half-trained row resumes from its newest checkpoint).
"""

import csv
import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from multiprocessing import get_context
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import DataError, OutputError
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..training.presets import TrainingPreset

# Table 3 of the paper: (dev perplexity per wordpiece, dev BLEU on newstest2013, parameters ×10⁶) of each row, base
# model N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1, ε_ls=0.1, 100K steps; blank cells are None.
PAPER_BASE = (4.92, 25.8, 65)
PAPER_ROWS = {
    "A h=1": (5.29, 24.9, None),
    "A h=1/2": (5.00, 25.5, None),
    "A h=2": (4.91, 25.8, None),
    "A h=4": (5.01, 25.4, None),
    "B d_k=1/4": (5.16, 25.1, 58),
    "B d_k=1/2": (5.01, 25.4, 60),
    "C N=1/3": (6.11, 23.7, 36),
    "C N=2/3": (5.19, 25.3, 50),
    "C N=4/3": (4.88, 25.5, 80),
    "C d_model=1/2": (5.75, 24.5, 28),
    "C d_model=2": (4.66, 26.0, 168),
    "C d_ff=1/2": (5.12, 25.4, 53),
    "C d_ff=2": (4.75, 26.2, 90),
    "D P_drop=0": (5.77, 24.6, None),
    "D P_drop+0.1": (4.95, 25.5, None),
    "D ε_ls=0": (4.67, 25.3, None),
    "D ε_ls=0.2": (5.47, 25.7, None),
    "E learned positions": (4.92, 25.7, None),
}
# the preset fields a row may change; every other name must be a field of the model's config
TRAINING_FIELDS = ("dropout", "label_smoothing")


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
    return math.exp(float(total) / tokens)


@dataclass(frozen=True)
class GridSettings:
    """What every row shares besides the preset: the languages, the splits it reports, and how it runs."""

    source_lang: str = "en"
    target_lang: str = "de"
    test_split: str = "test"
    eval_samples: int | None = None  # score the first N pairs of dev and test only (a quick look, not the table)
    threads: int | None = None


GRID_RECORD = "ablation.json"


def check_output_folder(output_dir: str | Path, preset: TrainingPreset, settings: GridSettings) -> None:
    """Make `output_dir` a grid's folder, or accept it as the same grid's: a folder with another preset or other
    settings in its `ablation.json` is refused (its rows would not compare), and so is a non-empty folder without
    one (nothing of ours to resume; nothing of someone else's is written over)."""
    folder = Path(output_dir)
    record = folder / GRID_RECORD
    wanted = json.loads(json.dumps({"preset": preset.as_dict(), "settings": {**asdict(settings), "threads": None}}))
    if record.is_file():
        recorded = json.loads(record.read_text())
        differ = sorted(
            f"{part}.{key}"
            for part in ("preset", "settings")
            for key in set(wanted[part]) | set(recorded.get(part, {}))
            if wanted[part].get(key) != recorded.get(part, {}).get(key)
        )
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


def run_row(
    preset: TrainingPreset, row: AblationRow, folder: Path, settings: GridSettings, tokenizer_path: Path | None = None
) -> dict:
    """Train the row into `folder` (resuming a run left there), then measure it: dev perplexity, dev and test BLEU
    with the paper's decoding (beam 4, α = 0.6, input + 50), parameters, updates and wall time. The record is
    written to `folder/row.json` last, atomically: a row with that file is done."""
    from ..data.corpora import load_corpus, sides
    from ..files.loading import load_model_and_tokenizer
    from ..files.outputs import staged_file
    from ..inference.scoring import score_translations
    from ..inference.translation import translate
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
    scores = {}
    for name, split in (("dev", trained.valid_split), ("test", settings.test_split)):
        corpus = load_corpus(trained.corpus, split, settings.source_lang, settings.target_lang, trained.dataset_config)
        if settings.eval_samples:
            corpus = corpus.select(range(min(settings.eval_samples, len(corpus))))
        sources, references = sides(corpus, settings.source_lang, settings.target_lang)
        hypotheses = translate(model, tokenizer, sources)
        scores[f"{name}_bleu"] = score_translations(hypotheses, references, lang=settings.target_lang)["bleu"]["score"]
        if name == "dev":
            scores["dev_perplexity"] = dev_perplexity(model, tokenizer, sources, references)
    record = {
        "row": asdict(row),
        "changes": row.describe(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_steps": trained.max_steps,
        "tokens_per_update": trained.tokens_per_update,
        **scores,
        "wall_seconds": time.perf_counter() - start,  # of this start: a resumed row counts only what it added
    }
    with staged_file(record_path, flag="row.json") as staging:
        staging.write_text(json.dumps(record, indent=2) + "\n")
    return record


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


def run_grid(
    preset: TrainingPreset,
    rows: list[AblationRow],
    output_dir: str | Path,
    settings: GridSettings,
    jobs: int = 1,
    log=print,
) -> list[dict]:
    """Run every row not yet done, `jobs` rows at once in processes of their own, all with the grid's tokenizer
    (`prepare_grid`), and write the table. Returns the records in the grid's order."""
    check_grid(preset, rows)
    output_dir = Path(output_dir)
    tokenizer_path = prepare_grid(preset, output_dir, settings)
    folders = {row.name: output_dir / "rows" / row.folder_name for row in rows}
    records = {}
    if jobs > 1 and len(rows) > 1:
        with ProcessPoolExecutor(min(jobs, len(rows)), mp_context=get_context("spawn")) as pool:
            futures = {
                row.name: pool.submit(run_row, preset, row, folders[row.name], settings, tokenizer_path) for row in rows
            }
            for row in rows:
                records[row.name] = futures[row.name].result()
                log(f"{row.name}: done")
    else:
        for row in rows:
            records[row.name] = run_row(preset, row, folders[row.name], settings, tokenizer_path)
            log(f"{row.name}: done")
    ordered = [records[row.name] for row in rows]
    write_table(ordered, output_dir)
    return ordered


COLUMNS = (
    "row",
    "changes",
    "parameters (M)",
    "train steps",
    "dev PPL",
    "dev BLEU",
    "test BLEU",
    "wall (min)",
    "paper PPL",
    "paper BLEU",
    "paper params (M)",
)


def table_rows(records: list[dict]) -> list[dict]:
    """The table's cells, row by row, with the base rows' mean ± standard deviation after them when there are
    several seeds."""

    def cells(record: dict) -> dict:
        name = record["row"]["name"]
        paper = PAPER_BASE if record["row"]["group"] == "base" else PAPER_ROWS.get(name, (None, None, None))
        return {
            "row": name,
            "changes": record["changes"],
            "parameters (M)": f"{record['parameters'] / 1e6:.2f}",
            "train steps": record["train_steps"],
            "dev PPL": f"{record['dev_perplexity']:.2f}",
            "dev BLEU": f"{record['dev_bleu']:.1f}",
            "test BLEU": f"{record['test_bleu']:.1f}",
            "wall (min)": f"{record['wall_seconds'] / 60:.1f}",
            "paper PPL": "" if paper[0] is None else paper[0],
            "paper BLEU": "" if paper[1] is None else paper[1],
            "paper params (M)": "" if paper[2] is None else paper[2],
        }

    table = [cells(record) for record in records]
    base = [record for record in records if record["row"]["group"] == "base"]
    if len(base) > 1:

        def spread(key: str, digits: int) -> str:
            values = [record[key] for record in base]
            return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

        summary = {column: "" for column in COLUMNS}
        summary.update(
            {"row": f"base, {len(base)} seeds", "changes": "mean ± sd", "dev PPL": spread("dev_perplexity", 2)}
        )
        summary.update({"dev BLEU": spread("dev_bleu", 1), "test BLEU": spread("test_bleu", 1)})
        table.insert(len(base), summary)
    return table


def write_table(records: list[dict], output_dir: Path) -> dict[str, Path]:
    """`table3.md`, `table3.csv` and `table3.png` (dev BLEU and dev perplexity of each row, the base rows' spread
    as a band) in `output_dir`, each replaced whole."""
    from matplotlib.figure import Figure

    from ..files.outputs import staged_file

    table = table_rows(records)
    paths = {kind: output_dir / f"table3.{kind}" for kind in ("md", "csv", "png")}
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(cells[column]) for column in COLUMNS) + " |" for cells in table]
    with staged_file(paths["md"], flag="table3.md") as staging:
        staging.write_text("\n".join(lines) + "\n")
    with staged_file(paths["csv"], flag="table3.csv") as staging, open(staging, "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(table)

    names = [record["row"]["name"] for record in records]
    figure = Figure(figsize=(max(8, 0.45 * len(names) + 2), 7))
    axes = figure.subplots(2, 1, sharex=True)
    base = [record for record in records if record["row"]["group"] == "base"]
    for axis, key, label in ((axes[0], "dev_bleu", "dev BLEU"), (axes[1], "dev_perplexity", "dev perplexity")):
        values = [record[key] for record in records]
        axis.bar(
            range(len(names)),
            values,
            color=["tab:gray" if r["row"]["group"] == "base" else "tab:blue" for r in records],
        )
        base_values = [record[key] for record in base]
        low, high = min(base_values), max(base_values)
        axis.axhspan(
            low,
            high if high > low else low + 1e-9,
            color="tab:orange",
            alpha=0.3,
            label=f"base, {len(base)} seed(s): min-max",
        )
        axis.axhline(statistics.mean(base_values), color="tab:orange")
        axis.set_ylabel(label)
        axis.legend(loc="upper right", fontsize=8)
    axes[1].set_yscale("log")  # one diverged row must not flatten the others
    axes[1].set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
    figure.tight_layout()
    with staged_file(paths["png"], flag="table3.png", suffix=".png") as staging:
        figure.savefig(staging, dpi=110)
    return paths
