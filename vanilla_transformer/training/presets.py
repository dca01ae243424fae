"""The training presets (`TrainingPreset`, `TRAINING_PRESETS`), the fields a command-line flag sets (`PRESET_FLAGS`;
`commands.add_typed_preset_arguments` adds the flags), and the `preset.json` record of what a run in a folder trained
with: the preset, and under `"run"` the settings besides it (`RunSettings`: languages, seed, precision, the corpus's
content digest). A resume must match the record, and a release's card and reproduce lines are written from it."""

import argparse
import json
import os
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path

from ..data.corpora import MULTI30K, corpus_sha256, local_corpus
from ..data.multi30k import holds_multi30k
from ..errors import SettingsError
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from .checkpoints import STAGING_PREFIX, checkpoint_step, list_checkpoints


@dataclass(frozen=True)
class TrainingPreset:
    """Everything a training run needs besides the data; `scripts/train.py` flags override single fields."""

    model_preset: str
    corpus: str
    vocab_size: int
    max_tokens: int
    tokens_per_update: int
    warmup_steps: int
    max_steps: int
    save_steps: int
    eval_steps: int
    average_last: int
    lr_factor: float = 1.0
    label_smoothing: float = 0.1
    dropout: float | None = None
    max_length: int = 256
    lowercase: bool = False
    dataset_config: str | None = None
    valid_split: str = "valid"
    model_overrides: tuple[tuple[str, object], ...] = ()

    def as_dict(self) -> dict:
        return asdict(self)

    def model_config(self, **fields) -> VanillaTransformerConfig:
        """The model this preset trains: `model_preset` with `model_overrides`, `dropout` when set, and positions for
        inputs of `max_length` and outputs of up to `max_length` + 64 tokens (validation generates up to
        `max_length` + 50) unless `model_overrides` sets `max_position_embeddings`; `fields` (the tokenizer's
        vocabulary size and special-token ids) over all of them."""
        values = {"max_position_embeddings": max(self.max_length + 64, 256), **dict(self.model_overrides)}
        if self.dropout is not None:
            values["dropout"] = self.dropout
        return VanillaTransformerConfig.from_preset(self.model_preset, **{**values, **fields})


@dataclass(frozen=True)
class RunSettings:
    """What a run trained with besides its preset, each of which changes its weights: recorded in `preset.json`
    under `"run"` (`record_run_preset`). `precision` is "fp32", "bf16" or "fp16"; `corpus_sha256` the content digest
    of a local corpus (`data.corpora.corpus_sha256`), so that the same file named another way is the same corpus and
    an edited one is not."""

    source_lang: str = "en"
    target_lang: str = "de"
    seed: int = 0
    precision: str = "fp32"
    per_device_batch_size: int | None = None
    max_grad_norm: float = 0.0
    gradient_accumulation_steps: int | None = None  # train-no-trainer's
    train_samples: int | None = None  # train-no-trainer's
    stream_buffer_pairs: int | None = None  # train-no-trainer --streaming's buffer (None: not streamed)
    corpus_sha256: str | None = None

    @classmethod
    def for_corpus(cls, corpus: str, **settings) -> "RunSettings":
        """The settings of a run on `corpus`, its digest computed."""
        return cls(corpus_sha256=corpus_sha256(corpus), **settings)

    def flags(self) -> str:
        """The training command's flags for the settings that differ from the defaults (languages aside)."""
        text = f" --seed {self.seed}" if self.seed else ""
        text += {"bf16": " --bf16", "fp16": " --fp16"}.get(self.precision, "")
        for field in ("per_device_batch_size", "max_grad_norm", "gradient_accumulation_steps", "train_samples"):
            value = getattr(self, field)
            text += f" --{field.replace('_', '-')} {value}" if value else ""
        if self.stream_buffer_pairs:
            text += f" --streaming --stream-buffer-pairs {self.stream_buffer_pairs}"
        return text


PAPER_BASE = TrainingPreset(
    model_preset="base",
    corpus="wmt14",
    dataset_config="de-en",
    valid_split="validation",
    vocab_size=37000,
    max_tokens=8192,
    tokens_per_update=50000,
    warmup_steps=4000,
    max_steps=100_000,
    save_steps=1500,
    eval_steps=5000,
    average_last=5,
)

TRAINING_PRESETS: dict[str, TrainingPreset] = {
    # §5.1-5.4, Table 3: 25k+25k tokens per update, 100k steps (base) / 300k (big), average the last 5 / 20
    # checkpoints, written every 10 minutes on 8 P100s (~1500 steps base, ~600 big).
    "paper-base": PAPER_BASE,
    "paper-big": replace(
        PAPER_BASE,
        model_preset="big",
        max_tokens=4096,
        max_steps=300_000,
        save_steps=600,
        eval_steps=10000,
        average_last=20,
    ),
    # Transformer-tiny of the Multi30k literature (d=128, 4+4 layers, 4 heads, d_ff 256; Wu et al. 2021) with its
    # recipe: dropout 0.3, about 8k source + 8k target tokens per update, peak rate 5e-3 after 2000 warmup updates
    # (lr_factor 2.53 on the §5.3 schedule), 8000 updates; shared 8k BPE; average the last 10 checkpoints. README.md,
    # section Results, has the sweep on valid that led here.
    "multi30k": TrainingPreset(
        model_preset="multi30k",
        corpus=MULTI30K,
        vocab_size=8000,
        max_tokens=8192,
        tokens_per_update=16384,
        warmup_steps=2000,
        lr_factor=2.53,
        dropout=0.3,
        max_steps=8000,
        save_steps=100,
        eval_steps=500,
        average_last=10,
    ),
    # The built-in grammar corpus: a model small enough to learn it in a few minutes on a laptop CPU.
    "demo": TrainingPreset(
        model_preset="multi30k",
        corpus="builtin",
        vocab_size=1000,
        max_tokens=3000,
        tokens_per_update=3000,
        warmup_steps=200,
        max_steps=500,
        save_steps=100,
        eval_steps=500,
        average_last=3,
        lr_factor=0.5,
        dropout=0.1,
        max_length=64,
        model_overrides=(("encoder_layers", 2), ("decoder_layers", 2)),
    ),
}


def get_training_preset(name: str, **overrides) -> TrainingPreset:
    """A preset by name, with some fields replaced (`None` values are ignored)."""
    if name not in TRAINING_PRESETS:
        raise SettingsError(f"unknown training preset {name!r}; choose one of {sorted(TRAINING_PRESETS)}.")
    return replace(TRAINING_PRESETS[name], **{k: v for k, v in overrides.items() if v is not None})


# TrainingPreset fields set by a flag of the same name, with its help (`commands.add_typed_preset_arguments` adds the
# flags, each numeric one checked by its rule in `ranges.TRAINING_RANGES`)
PRESET_FLAGS: dict[str, str] = {
    "corpus": "'multi30k' (downloaded once), 'builtin', a folder of {split}.{lang} files, or a datasets name",
    "dataset_config": "the datasets config, e.g. de-en for wmt14",
    "valid_split": "the validation split's name (datasets on the Hub: 'validation')",
    "vocab_size": "joint BPE vocabulary size",
    "max_tokens": "padded source+target tokens per batch (and process)",
    "tokens_per_update": "gradient accumulation reaches about this many (all processes together)",
    "warmup_steps": "§5.3 warmup",
    "lr_factor": "multiplies the §5.3 learning rate",
    "max_steps": "updates in all (a resumed run may raise it)",
    "save_steps": "updates between checkpoints",
    "eval_steps": "updates between validations",
    "average_last": "checkpoints kept, for averaging (§6.1); train.py averages them into final/",
    "label_smoothing": "§5.4 label smoothing",
    "dropout": "dropout rate (§5.4)",
    "max_length": "pairs with more tokens on a side are dropped (and counted)",
    "lowercase": "train on lowercased text, as the Multi30k literature (the tokenizer lowercases)",
}


def preset_from_arguments(args: argparse.Namespace) -> TrainingPreset:
    """The preset named by `--preset`, with the fields its flags gave replaced."""
    return get_training_preset(args.preset, **{field: getattr(args, field) for field in PRESET_FLAGS})


# The fields a resumed run may change: how long it runs and what it keeps, not what its updates so far did (the §5.3
# rate depends on the step alone, so a longer run continues the same curve).
RESUMABLE_FIELDS = ("max_steps", "save_steps", "eval_steps", "average_last")
# The fields the tokenizer depends on: all a folder fixes while it holds a tokenizer but no checkpoint yet (a run
# refused right after tokenizing, or stopped before its first save), since its next start trains from scratch.
TOKENIZER_FIELDS = ("corpus", "dataset_config", "vocab_size", "lowercase")


def same_setting(field: str, value: object, other: object) -> bool:
    """Whether two values of a preset field (as `preset.json` holds them) mean the same thing."""
    if field == "corpus" and value != other and MULTI30K in (value, other):
        # a run recorded before Multi30k had a name holds the path of a folder of its files (../shared/data/multi30k)
        return holds_multi30k(str(other if value == MULTI30K else value))
    if field == "corpus" and value != other and Path(str(value)).exists():
        # the same file or folder written another way (absolute, or relative to another directory)
        return Path(str(other)).exists() and Path(str(value)).samefile(str(other))
    return value == other


def _changed_corpus(saved: dict, new: dict) -> str | None:
    """How the corpus of a new start differs from the one a run recorded, or None when it is the same: by content
    digest where both have one (the same file under another name is the same corpus, an edited file is not), else
    by name (`same_setting`)."""
    digests = saved.get("run", {}).get("corpus_sha256"), new.get("run", {}).get("corpus_sha256")
    if None not in digests:
        if digests[0] == digests[1]:
            return None
        return (
            f"corpus: {saved['corpus']!r} (sha256 {digests[0][:12]}…) -> {new['corpus']!r} (sha256 "
            f"{digests[1][:12]}…), other content"
        )
    if same_setting("corpus", new["corpus"], saved.get("corpus")):
        return None
    return f"corpus: {saved.get('corpus')!r} -> {new['corpus']!r}"


def read_run_preset(path: str | Path) -> dict:
    """A run's `preset.json` as it holds it (lists, not tuples). A field added to `TrainingPreset` since the run was
    recorded reads as its default, which the run had."""
    defaults = {field.name: field.default for field in fields(TrainingPreset) if field.default is not MISSING}
    return json.loads(json.dumps(defaults)) | json.loads(Path(path).read_text())


def run_record(preset: TrainingPreset, run: RunSettings | None = None) -> dict:
    """What `preset.json` holds for a run of `preset` with `run`: the preset's fields (a local corpus as its absolute
    path, so that a resume from another directory cannot take another file for it) and `"run"`."""
    record = json.loads(json.dumps(preset.as_dict()))  # as preset.json holds it: lists, not tuples
    local = local_corpus(preset.corpus)
    if local is not None:
        record["corpus"] = str(local)
    if run is not None:
        record["run"] = asdict(run)
    return record


def record_run_preset(
    output_dir: str | Path, preset: TrainingPreset, resume: bool, write: bool = True, run: RunSettings | None = None
) -> None:
    """Write `preset` and `run` to `output_dir/preset.json` (`run_record`), the record of what the run in that folder
    trained with.

    A folder that already holds a run (checkpoints, or its tokenizer) is continued only with the preset and run
    settings that run recorded, `RESUMABLE_FIELDS` aside (before its first checkpoint, only `TOKENIZER_FIELDS` and
    the corpus's content count), and never restarted: either would leave checkpoints of two runs side by side,
    averaged together at the end, and a `preset.json` that describes neither. Both raise a `ValueError` that names
    each field that differs, as does a `max_steps` below the newest checkpoint's step. A record written before run
    settings were recorded is checked on the preset alone. `write=False` checks only (the other processes of a
    distributed run)."""
    output = Path(output_dir)
    record = output / "preset.json"
    new = run_record(preset, run)
    checkpoints = list_checkpoints(output) if output.is_dir() else []
    tokenizer = [output / "tokenizer"] if (output / "tokenizer" / "tokenizer.json").is_file() else []
    earlier = checkpoints + tokenizer
    if earlier and not resume:
        raise SettingsError(
            f"{output} already holds a run ({', '.join(path.name for path in earlier)}); starting over there would "
            "mix its checkpoints with the new ones. Give a new output directory, or delete that one first."
        )
    newest_step = checkpoint_step(checkpoints[-1]) if checkpoints else 0
    if newest_step > preset.max_steps:
        raise SettingsError(
            f"{output} holds checkpoint-{newest_step}, past max_steps={preset.max_steps}: give a max_steps of at least "
            f"{newest_step}, or average the checkpoints you want with scripts/average_checkpoints.py."
        )
    if earlier and record.is_file():
        saved = read_run_preset(record)
        fixed = [field for field in new if field not in RESUMABLE_FIELDS] if checkpoints else TOKENIZER_FIELDS
        changed = [
            f"{field}: {saved.get(field)!r} -> {new[field]!r}"
            for field in fixed
            if field not in ("corpus", "run") and not same_setting(field, new[field], saved.get(field))
        ]
        corpus = _changed_corpus(saved, new)
        changed = ([corpus] if corpus else []) + changed
        if checkpoints and "run" in saved and "run" in new:
            changed += [
                f"{field}: {saved['run'].get(field)!r} -> {value!r}"
                for field, value in new["run"].items()
                if field != "corpus_sha256" and saved["run"].get(field) != value
            ]
        if changed:
            free = (
                f"only {', '.join(RESUMABLE_FIELDS)} may change"
                if checkpoints
                else f"it has no checkpoint yet: only {', '.join(TOKENIZER_FIELDS)}, which its tokenizer depends on, "
                "must stay"
            )
            raise SettingsError(
                f"{output} holds a run trained with other settings ({'; '.join(changed)}). Resume it with the "
                f"settings in {record} ({free}), or give a new output directory."
            )
    if write:
        output.mkdir(parents=True, exist_ok=True)
        staging = record.with_name(f"{STAGING_PREFIX}{record.name}")
        staging.write_text(json.dumps(new, indent=2) + "\n")
        os.replace(staging, record)
