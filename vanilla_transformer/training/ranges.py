"""The range each number a user gives must lie in, written once (`Range`) for the command line's `type=` checks
(`cli.arguments`) and the training settings' own check (`settings.TrainingSettings.check`, for the Python API)."""

import math
from dataclasses import dataclass

from ..data.tokenization import MIN_VOCAB_SIZE, SPECIAL_TOKENS
from ..errors import SettingsError

# the widest beam a command accepts: the paper decodes with 4 (§6.1), and past a few dozen beams BLEU only falls while
# each step scores batch x beams x vocabulary candidates (9000 beams of an 8k vocabulary run for minutes per sentence)
MAX_NUM_BEAMS = 1000


@dataclass(frozen=True)
class Range:
    """Finite numbers from `low` to `high`, each end included unless `low_open` / `high_open`; whole numbers only
    when `whole`. `fix` says what to give instead, for the message of a value refused."""

    low: float
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    whole: bool = False
    fix: str = ""

    def problem(self, value: object) -> str | None:
        """Why `value` is refused, or None."""
        if isinstance(value, bool) or not isinstance(value, int | float) or (self.whole and not isinstance(value, int)):
            return f"not a {'whole number' if self.whole else 'number'}: {self.fix}"
        if not math.isfinite(value):
            return f"not a finite number: {self.fix}"
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return None if above and below else f"out of range: {self.fix}"

    def parse(self, text: str, check_range: bool = True) -> int | float:
        """`text` as a number (in the range, unless not `check_range`), else a `ValueError` naming the fix."""
        try:
            value = int(text) if self.whole else float(text)
        except ValueError:
            raise SettingsError(f"{text!r} is not a {'whole number' if self.whole else 'number'}: {self.fix}") from None
        problem = self.problem(value) if check_range else None
        if problem:
            raise SettingsError(f"{text} is {problem}")
        return value


def count(counted: str, *, optional: bool = False) -> Range:
    """Whole numbers of at least 1 of `counted` things; `optional` for options with a default when left out."""
    leave_out = ", or leave the flag out" if optional else ""
    return Range(1, whole=True, fix=f"the number of {counted} must be at least 1{leave_out}")


BEAMS = Range(
    1, MAX_NUM_BEAMS, whole=True, fix=f"give a beam size from 1 (greedy) to {MAX_NUM_BEAMS}; the paper's is 4"
)
TRAINING_RANGES: dict[str, Range] = {
    # the preset fields (`presets.PRESET_FLAGS`)
    "vocab_size": Range(
        MIN_VOCAB_SIZE,
        whole=True,
        fix=f"the byte-level BPE needs room for its {len(SPECIAL_TOKENS)} special tokens and 256 byte symbols: give "
        f"{MIN_VOCAB_SIZE} or more (the paper: 37000 for WMT14 En-De, ~8000 suits Multi30k)",
    ),
    "max_tokens": count("padded tokens per batch"),
    "tokens_per_update": count("tokens per update"),
    "warmup_steps": count("warmup updates (the §5.3 rate divides by it)"),
    # NaN fails every comparison, and is refused as not finite
    "lr_factor": Range(
        0,
        low_open=True,
        fix="the learning rate must be a number above 0 (at 0 nothing is learned, below 0 Adam refuses); 1 is the "
        "paper's §5.3 rate",
    ),
    "max_steps": count("updates in all"),
    "save_steps": count("updates between checkpoints"),
    "eval_steps": count("updates between validations"),
    "average_last": count("checkpoints kept for averaging"),
    "label_smoothing": Range(
        0, 1, fix="label smoothing is a probability mass: give a number from 0 to 1 (the paper: 0.1)"
    ),
    "dropout": Range(
        0, 1, high_open=True, fix="give a dropout rate from 0 to below 1, where nothing would pass (the paper: 0.1)"
    ),
    "max_length": count("tokens a side of a pair may have"),
    # the options of `training.run.train`
    "per_device_batch_size": count("pairs per batch", optional=True),
    "eval_samples": count("validation pairs", optional=True),
    "eval_batch_size": count("pairs per validation batch"),
    "eval_beams": BEAMS,
    "log_steps": count("updates between log lines"),
    "threads": count("CPU threads", optional=True),
    "max_grad_norm": Range(
        0,
        fix="clip gradients to a norm above 0, or give 0 for no clipping (the paper's choice); a negative norm would "
        "reverse the gradients",
    ),
}
