"""Table 3 of the paper (§6.2, "Model Variations"): a grid of variations of a training preset, each row a run of the
normal training code (`training.train`), scored as the paper scores the table (`row_scores`), recorded
(`grid_records`) and laid out beside the paper's numbers (`report`).

Every row reads the grid's one tokenizer (`<output_dir>/tokenizer`); each row lives in `<output_dir>/rows/<row>/` and
is done when its `row.json` exists, so a killed grid resumes where it stopped.
"""

import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields, replace
from multiprocessing import get_context
from pathlib import Path

import torch

from vanilla_transformer.errors import DataError
from vanilla_transformer.files.loading import CONFIG_ERRORS, config_error_message
from vanilla_transformer.files.outputs import check_output_folder, write_marker, write_text_atomic
from vanilla_transformer.model.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.training.presets import TrainingPreset
from vanilla_transformer.training.ranges import TRAINING_RANGES

from .grid_records import GridSettings, RecordFolder, folder_name, grid_settings, record_text
from .report import choose_lr_factor, variants, write_table
from .row_scores import dev_curve, dev_perplexity, score_split, train_loss_curve

# the preset fields a row may change; every other name must be a field of the model's config
TRAINING_FIELDS = ("dropout", "label_smoothing", "lr_factor")

SEED_WINDOW = 2.0


@dataclass(frozen=True)
class AblationRow:
    """One row: a name, its group ("base", "A" … "E", "LN", or a grid file's own), the fields it changes (of the
    model's config, or `TRAINING_FIELDS` of the preset) and its seed."""

    name: str
    group: str
    changes: tuple[tuple[str, object], ...] = ()
    seed: int = 0

    @property
    def folder_name(self) -> str:
        return folder_name(self.name)

    def describe(self) -> str:
        return ", ".join(f"{field}={value}" for field, value in self.changes) or "(the preset's model)"


def table3_grid(preset: TrainingPreset, seeds: int = 1) -> list[AblationRow]:
    """The paper's Table 3 rows scaled to `preset`'s model (on the paper's base model, h=8, N=6, d_k=64, its own
    values): (A) 1, h/2, 2h, 4h heads at constant h·d_k ("A h=1/2" is h/2 heads), (B) d_k/4, d_k/2 with d_v unchanged,
    (C) N·2/6, 4/6, 8/6, d_model/2 and ×2 (d_k follows), d_ff/2 and ×2, (D) dropout 0 and +0.1, ε_ls 0 and 0.2, (E)
    learned positions; then pre-LN, and the base row under `seeds` seeds. Rows of sizes not whole are left out."""
    config = preset.model_config()
    d_model, heads, layers = config.d_model, config.encoder_attention_heads, config.encoder_layers
    d_k = d_model // heads
    rows = [AblationRow("base", "base")]

    def add(name: str, group: str, **changes) -> None:
        sizes = {k: v for k, v in changes.items() if k not in TRAINING_FIELDS}
        if all(v > 0 and float(v).is_integer() for v in sizes.values()):
            rows.append(AblationRow(name, group, tuple((changes | {k: int(v) for k, v in sizes.items()}).items())))

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
    add("D P_drop+0.1", "D", dropout=round(config.dropout + 0.1, 4))
    add("D ε_ls=0", "D", label_smoothing=0.0)
    add("D ε_ls=0.2", "D", label_smoothing=0.2)
    rows.append(AblationRow("E learned positions", "E", (("position_encoding", "learned"),)))
    rows.append(AblationRow("pre-LN", "LN", (("normalize_before", True),)))
    return with_base_seeds(rows, seeds)


# what a grid file's row may hold: its key, the JSON type, and that type as the message names it
ROW_KEYS = {
    "name": (str, "a string"),
    "group": (str, "a string"),
    "changes": (dict, "an object"),
    "seed": (int, "an integer"),
}


def load_grid(path: str | Path) -> list[AblationRow]:
    """A grid from a JSON list of `{"name": ..., "changes": {field: value, ...}}`, optionally with `"group"` and
    `"seed"`; a `base` row is added first when the file has none. A row with another key (a misspelt `"changes"` would
    train the base model), a value of the wrong type or no changes is refused."""
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
    """Refuse, before anything trains or is written, a grid with a repeated row name, an unknown field, a value out of
    its range (`TRAINING_RANGES`), or a model it cannot build."""
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
        problems = [
            f"{name}={value} is {problem}"
            for name, value in row.changes
            if name in TRAINING_RANGES and (problem := TRAINING_RANGES[name].problem(value))
        ]
        try:
            row_preset(preset, row).model_config()
        except CONFIG_ERRORS as error:
            problems.append(f"its model cannot be built: {config_error_message(error)}")
        if problems:
            problems = "; ".join(problem.rstrip(".") for problem in problems)
            raise DataError(f"row {row.name!r} cannot train: {problems}; change the row or leave it out.")


def row_preset(preset: TrainingPreset, row: AblationRow) -> TrainingPreset:
    """`preset` with the row's changes and no checkpoint averaging (Table 3 is read off single models, §6.2)."""
    model = dict(preset.model_overrides) | {f: v for f, v in row.changes if f not in TRAINING_FIELDS}
    training = {field: value for field, value in row.changes if field in TRAINING_FIELDS}
    return replace(preset, model_overrides=tuple(model.items()), average_last=1, **training)


def run_row(
    preset: TrainingPreset, row: AblationRow, folder: Path, settings: GridSettings, tokenizer_path: Path | None = None
) -> dict:
    """Train the row into `folder` (resuming a run left there), then score it with the paper's decoding (beam 4,
    α = 0.6, input + 50) into its record, `folder/row.json`, written last and whole: a row with that file is done."""
    from vanilla_transformer.files.loading import load_model_and_tokenizer
    from vanilla_transformer.training.run import train
    from vanilla_transformer.training.settings import TrainingSettings

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
    text = record_text(record)
    write_text_atomic(record_path, text, "row.json")
    return json.loads(text)


def prepare_grid(preset: TrainingPreset, output_dir: Path, settings: GridSettings) -> Path:
    """The grid's one tokenizer, `<output_dir>/tokenizer`, and the corpus tokenized into the cache before any row
    trains, so that the rows can start at once without each tokenizing it again."""
    from accelerate import PartialState

    from vanilla_transformer.training.run import prepare_run_data
    from vanilla_transformer.training.run_folder import RunFolder
    from vanilla_transformer.training.settings import TrainingSettings

    state = PartialState(cpu=not torch.cuda.is_available())  # the state `train` makes in this process
    run = TrainingSettings(preset, output_dir, settings.source_lang, settings.target_lang)
    prepare_run_data(state, run, RunFolder.read(output_dir))
    return output_dir / "tokenizer"


def with_base_seeds(rows: list[AblationRow], seeds: int) -> list[AblationRow]:
    """`rows` with the base row under seeds 0 … `seeds` - 1 (`base seed 1`, …, after the base rows)."""
    have = {row.seed for row in rows if row.group == "base"}
    extra = [AblationRow(f"base seed {seed}", "base", seed=seed) for seed in range(1, seeds) if seed not in have]
    after = max((number for number, row in enumerate(rows) if row.group == "base"), default=-1) + 1
    return rows[:after] + extra + rows[after:]


def reseed_rows(rows: list[AblationRow], records: dict[str, dict], seeds: int) -> list[AblationRow]:
    """The second wave: seeds 1 … `seeds` - 1 of every row whose seed-0 test or dev BLEU lies within `SEED_WINDOW` of
    the base row's mean, where one seed cannot tell the difference from the noise (issue 48)."""
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
    """One start of a grid: the rows' records, from the records folder, from the output folder's `row.json`, or
    trained (`jobs` rows at once, each in a process of its own)."""

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

    def adopt_sweep_run(self, base: AblationRow, sweep: list[AblationRow], chosen: float) -> None:
        """The sweep's run at the chosen factor as the base row: the same training, so it is not trained again."""
        source = next(row for row in sweep if self.records[row.name]["lr_factor"] == chosen)
        record = self.records[source.name] | {"row": asdict(base), "changes": base.describe()}
        text = record_text(record | {"lr_sweep_row": source.name})
        if not (self.folder(base) / "row.json").is_file():  # the output folder resumes without --records too
            write_text_atomic(self.folder(base) / "row.json", text, "row.json")
        self.finished(base, json.loads(text), f" (the sweep's run at lr_factor={chosen:g})")


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
    """Run every row not yet done and write the table; returns the records, the sweep's first. In order: the
    learning-rate sweep on the base row (its chosen run is the base row); the grid's rows, with the base row under
    `seeds` seeds; then the second wave (`reseed_rows`). A row kept in `records_dir` is not trained again, and every
    row that finishes is kept there at once."""
    rows = with_base_seeds(rows, seeds)
    # the base row (seed 0) at each learning-rate factor of the sweep (§5.3's rate times the factor)
    sweep = [AblationRow(f"base lr_factor={f:g}", "lr", (("lr_factor", float(f)),)) for f in settings.lr_factors]
    check_grid(preset, sweep + rows)
    output_dir = Path(output_dir)
    kept = RecordFolder(records_dir, grid_settings(preset, settings)) if records_dir is not None else None
    grid = _GridRun(output_dir, settings, jobs, log, kept)
    if sweep:
        grid.run(preset, sweep)
        chosen = choose_lr_factor([grid.records[row.name] for row in sweep])
        results = {f"{row.changes[0][1]:g}": grid.records[row.name]["dev_bleu"] for row in sweep}
        if kept is not None:
            kept.note_lr_choice({"factors": list(settings.lr_factors), "dev_bleu": results, "chosen": chosen})
        log(f"learning-rate factor {chosen:g} chosen on the base row's dev BLEU ({results})")
        preset = replace(preset, lr_factor=chosen)
        base = next(row for row in rows if row.name == "base")
        if kept is None or kept.get(base, chosen) is None:
            grid.adopt_sweep_run(base, sweep, chosen)
    grid.run(preset, rows)
    second = reseed_rows(rows, grid.records, seeds)
    if second:
        log(f"second wave: {seeds} seeds of {len(second) // (seeds - 1)} row(s) within {SEED_WINDOW} BLEU of the base")
        check_grid(preset, rows + second)
        grid.run(preset, second)
    every = sweep + rows + second
    ordered = [grid.records[row.name] for row in every]
    if kept is not None:
        kept.note(rows=[row.name for row in every])
    write_table(ordered, output_dir)
    return ordered


def table_from_records(records_dir: str | Path, output_dir: str | Path) -> dict[str, Path]:
    """The table, CSV and plots of the records in `records_dir`, written into `output_dir`: a new or empty folder,
    one an earlier `--table-only` wrote, or the folder holding the records."""
    check_output_folder(output_dir, "table3", recognised_by=[f"{Path(records_dir).name}/ablation.json"])
    records = RecordFolder(records_dir).records()
    if not variants(records):  # none, or the learning-rate sweep's alone
        raise DataError(f"--records {records_dir} holds no row's record yet; run the grid with --records first.")
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    written = write_table(records, Path(output_dir))
    write_marker(output_dir, "table3", "table3")
    return written
