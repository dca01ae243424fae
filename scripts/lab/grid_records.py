"""A Table 3 grid's records: the settings its rows share (`ablation.json`, in the output folder and in a records
folder, `RecordFolder`) and each finished row's record, strict JSON with one item a line (`record_text`)."""

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from vanilla_transformer.errors import DataError, OutputError
from vanilla_transformer.files.outputs import write_text_atomic
from vanilla_transformer.training.presets import TrainingPreset

GRID_RECORD = "ablation.json"


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


def _settings_json(settings: GridSettings) -> dict:
    """`settings` as JSON reads them back, without the thread count (it changes no result)."""
    return json.loads(json.dumps({**asdict(settings), "threads": None}))


def grid_settings(preset: TrainingPreset, settings: GridSettings) -> dict:
    """The grid's settings as `ablation.json` records them: the preset and the settings. With `lr_factors` the
    preset's `lr_factor` is None: the sweep on the base row chooses it."""
    preset_fields = json.loads(json.dumps(preset.as_dict()))
    if settings.lr_factors:
        preset_fields["lr_factor"] = None
    return {"preset": preset_fields, "settings": _settings_json(settings)}


def settings_differ(wanted: dict, recorded: dict) -> list[str]:
    """The fields (`preset.max_steps`, `settings.test_split`, …) in which two grids' settings differ; a setting added
    since `recorded` was written counts as its default there, so that an older grid still resumes."""
    defaults = {"preset": {}, "settings": _settings_json(GridSettings())}
    return sorted(
        f"{part}.{key}"
        for part in ("preset", "settings")
        for key in set(wanted[part]) | set(recorded.get(part, {}))
        if wanted[part].get(key, defaults[part].get(key)) != recorded.get(part, {}).get(key, defaults[part].get(key))
    )


def _open_grid_folder(folder: Path, grid: dict, flag: str, noun: str, why: str) -> None:
    """Accept `folder` as the grid's (its `ablation.json` holds the same settings) or make it one, writing `grid`
    whole; a folder with other settings, or a non-empty one without `ablation.json`, is refused."""
    record = folder / GRID_RECORD
    if record.is_file():
        differ = settings_differ(grid, read_record(record))
        if differ:
            raise OutputError(f"{flag} {folder} holds a grid with other settings ({', '.join(differ)} differ): {why}")
    elif folder.is_dir() and any(folder.iterdir()):
        raise OutputError(
            f"{flag} {folder} is not empty and holds no {noun} of ours (no {GRID_RECORD}); give a new or empty folder."
        )
    else:  # whole or not at all: a half-written record would stop every later start with a JSON error
        write_text_atomic(record, json.dumps(grid, indent=2, ensure_ascii=False) + "\n", flag)


def check_grid_folder(output_dir: str | Path, preset: TrainingPreset, settings: GridSettings) -> None:
    """Make `output_dir` a grid's folder, or accept it as the same grid's (`_open_grid_folder`)."""
    why = "its rows would not compare with new ones; give the flags it was started with, or another --output-dir."
    _open_grid_folder(Path(output_dir), grid_settings(preset, settings), "--output-dir", "grid", why)


def plain(value: object) -> object:
    """`value` as it reads back from JSON (tuples as lists), with NaN and infinities as None: a record is strict
    JSON, and a diverged row's non-finite numbers are missing values."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def record_text(record: dict) -> str:
    """A record as strict JSON with one key a line and one item of a list a line, so that a diff of two versions of
    a record shows what changed line by line."""

    def dump(value: object) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    lines = []
    for key, value in plain(record).items():
        if isinstance(value, list) and value:
            items = ",\n".join(f"    {dump(item)}" for item in value)
            lines.append(f"  {dump(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {dump(key)}: {dump(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def read_record(path: Path) -> dict:
    """A grid's JSON record (`ablation.json` or a row's), or a `DataError` naming the damaged file."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(
            f"{path} is not a whole record ({type(error).__name__}: {error}): restore it (git checkout {path}), or "
            f"delete it to train its row again."
        ) from None
    if not isinstance(record, dict):
        raise DataError(f"{path} holds no record (a JSON object): restore it, or delete it to train its row again.")
    return record


def folder_name(row_name: str) -> str:
    """A row's name as a file or folder name."""
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in row_name)


class RecordFolder:
    """A grid's records kept for good (`--records DIR`, meant for the repository): `ablation.json`, the grid's settings
    (here also the rows' order and the learning-rate choice), and `rows/<row>.json`, one finished row's record each. A
    later run with the same settings trains only the rows it lacks; one with other settings is refused, so that
    records of two recipes never mix in one table."""

    def __init__(self, folder: str | Path, grid: dict | None = None):
        """Open `folder` for a grid whose settings are `grid`, creating it when new; with `grid=None`, open an
        existing records folder to read (`table_from_records`)."""
        self.folder = Path(folder)
        self.index_path = self.folder / GRID_RECORD
        if grid is not None:
            why = "rows of two recipes would mix; give the flags they were trained with, or another --records folder."
            _open_grid_folder(self.folder, grid, "--records", "records", why)
        elif not self.index_path.is_file():
            raise DataError(f"--records {self.folder} holds no grid's records (no {GRID_RECORD}); check the path.")

    def index(self) -> dict:
        return read_record(self.index_path)

    def path(self, row_name: str) -> Path:
        return self.folder / "rows" / f"{folder_name(row_name)}.json"

    def get(self, row, lr_factor: float) -> dict | None:
        """The kept record of `row` (an `AblationRow`) trained at `lr_factor`, or None. A record whose row changes
        other fields than the grid's row of that name, or that was trained at another learning rate (another choice
        of the sweep), is refused: it would stand in the table for a row it is not."""
        path = self.path(row.name)
        if not path.is_file():
            return None
        record = read_record(path)
        if record.get("row") != plain(asdict(row)):
            raise OutputError(
                f"{path} is the record of the row {record.get('row')}, but the grid's row of that name is "
                f"{plain(asdict(row))}; rename the grid's row, or move the record away to train it again."
            )
        if record.get("lr_factor") != lr_factor:
            raise OutputError(
                f"{path} was trained at lr_factor {record.get('lr_factor')}, but this grid trains {row.name!r} at "
                f"{lr_factor}; records of two learning rates would mix: give another --records folder."
            )
        return record

    def keep(self, record: dict) -> Path:
        return write_text_atomic(self.path(record["row"]["name"]), record_text(record), "--records")

    def note(self, **entries: object) -> None:
        """Add `entries` to `ablation.json` (the settings it holds stay as they are)."""
        index = self.index() | plain(entries)
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
        records = []
        for path in sorted((self.folder / "rows").glob("*.json")):
            record = read_record(path)
            if path != self.path(record["row"]["name"]):  # a copy would count as a second seed of its row
                raise DataError(
                    f"{path} holds the record of row {record['row']['name']!r}, whose record is "
                    f"{self.path(record['row']['name']).name}: a copy or a renamed file; move it out of {self.folder}."
                )
            records.append(record)
        return sorted(records, key=lambda record: order.get(record["row"]["name"], len(order)))
