"""The training presets as data (`TrainingPreset`, `TRAINING_PRESETS`) and the fields a command-line flag sets
(`PRESET_FLAGS`; `cli.arguments.add_typed_preset_arguments` adds the flags). A run's other settings, and the record
of what it trained with, are `settings.TrainingSettings`."""

import argparse
from dataclasses import asdict, dataclass, fields, replace

from transformers import PreTrainedTokenizerBase

from ..data.multi30k import MULTI30K
from ..data.tokenization import tokenizer_fingerprint
from ..errors import SettingsError
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration


@dataclass(frozen=True)
class TrainingPreset:
    """Everything a training run needs besides the data; `train`'s flags override single fields."""

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

    def model_for(self, tokenizer: PreTrainedTokenizerBase) -> VanillaTransformerForConditionalGeneration:
        """The model, untrained, with the tokenizer's vocabulary, special tokens and fingerprint (recorded in
        config.json, so that loading the model beside another tokenizer is refused)."""
        config = self.model_config(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.bos_token_id,
            tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        )
        return VanillaTransformerForConditionalGeneration(config)


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
    # (lr_factor 2.53 on the §5.3 schedule), 8000 updates; shared 8k BPE; average the last 10 checkpoints.
    # docs/training-log.md has the sweep on valid that led here.
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


# TrainingPreset fields set by a flag of the same name, with its help (`cli.arguments.add_typed_preset_arguments`
# adds the flags, each numeric one checked by its rule in `ranges.TRAINING_RANGES`)
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


def preset_from_arguments(args: argparse.Namespace, recorded: dict | None = None) -> TrainingPreset:
    """The preset named by `--preset` (default: demo), or the one a resumed run `recorded`, with the fields its flags
    gave replaced."""
    given = {field: getattr(args, field) for field in PRESET_FLAGS}
    if recorded is None:
        return get_training_preset(args.preset or "demo", **given)
    return replace(preset_from_record(recorded), **{name: value for name, value in given.items() if value is not None})


def preset_from_record(record: dict) -> TrainingPreset:
    """The preset a run recorded in its preset.json (`run_folder.read_run_preset`)."""
    values = {field.name: record[field.name] for field in fields(TrainingPreset)}
    values["model_overrides"] = tuple(tuple(pair) for pair in values["model_overrides"])
    return TrainingPreset(**values)
