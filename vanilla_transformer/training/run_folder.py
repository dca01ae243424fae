"""A run's folder, read once (`RunFolder.read`: its record `preset.json`, its checkpoints, the one a resume starts
from, its tokenizer), then checked and held for the run (`RunFolder.open`)."""

import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import torch
from accelerate import PartialState

from ..data.corpora import same_corpus
from ..data.staging import atomic_file
from ..errors import OutputError, SettingsError
from ..files.outputs import check_not_an_input, check_output_folder, hold_lock
from .checkpoints import (
    RESUMABLE_FIELDS,
    RUN_RECORD,
    check_checkpoint_pickles,
    checkpoint_step,
    last_complete_checkpoint,
    list_checkpoints,
)
from .presets import TrainingPreset
from .settings import TrainingSettings, flag

logger = logging.getLogger(__name__)

# what a folder holding a tokenizer but no checkpoint yet fixes: its next start trains from scratch
TOKENIZER_FIELDS = ("corpus", "dataset_config", "vocab_size", "lowercase")


def read_run_preset(path: str | Path) -> dict:
    """A run's `preset.json` (lists, not tuples); a field added to `TrainingPreset` since reads as its default."""
    defaults = {field.name: field.default for field in fields(TrainingPreset) if field.default is not MISSING}
    return json.loads(json.dumps(defaults)) | json.loads(Path(path).read_text())


@dataclass(frozen=True)
class RunFolder:
    """What a run folder holds, as `read` found it."""

    path: Path
    record: dict | None  # preset.json
    checkpoints: tuple[Path, ...]  # checkpoint-N folders, oldest first
    resume_from: Path | None  # the newest complete checkpoint, where the Trainer resumes
    tokenizer: Path | None  # tokenizer/, once a start has saved it

    @classmethod
    def read(cls, path: str | Path) -> "RunFolder":
        """The folder at `path` (which need not exist yet); a file there is refused."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise SettingsError(f"--output-dir {path} is a file, not a folder: give a new folder, or the run's own.")
        if not path.is_dir():
            return cls(path, None, (), None, None)
        record = read_run_preset(path / RUN_RECORD) if (path / RUN_RECORD).is_file() else None
        tokenizer = path / "tokenizer" if (path / "tokenizer" / "tokenizer.json").is_file() else None
        # an interrupted save is a tmp-checkpoint-N folder, never a checkpoint-N
        checkpoints = tuple(list_checkpoints(path))
        return cls(path, record, checkpoints, last_complete_checkpoint(path) if checkpoints else None, tokenizer)

    def check(self, settings: TrainingSettings) -> None:
        """Refuse, before anything is read or written: too few checkpoints to average (`checkpoint_problem`), settings
        that may not continue the folder's run (`check_continuation`), a resume checkpoint holding more than tensors,
        and a folder that is, holds or lies inside the corpus, or holds files no run of ours wrote (unless
        `settings.overwrite`)."""
        problem = checkpoint_problem(settings, self)
        if problem:
            raise SettingsError(problem)
        self.check_continuation(settings)
        if self.resume_from is not None:
            check_checkpoint_pickles(self.resume_from)
        check_not_an_input(self.path, [("the corpus", settings.corpus.location)])
        recognised = (RUN_RECORD, "tokenizer/tokenizer.json")
        place = check_output_folder
        if place(self.path, "training-run", settings.overwrite, recognised_by=recognised, overwrite_does="train there"):
            logger.warning("--overwrite: training in %s, which holds files no run of ours wrote", self.path)

    def check_continuation(self, settings: TrainingSettings) -> None:
        """Refuse to restart the folder's run, or to continue it with settings other than it recorded
        (`RESUMABLE_FIELDS` aside; before its first checkpoint only `TOKENIZER_FIELDS` and the corpus count): either
        would average checkpoints of two runs together."""
        earlier = list(self.checkpoints) + ([self.tokenizer] if self.tokenizer else [])
        if earlier and not settings.resume:
            raise SettingsError(
                f"{self.path} already holds a run ({', '.join(path.name for path in earlier)}); starting over there "
                "would mix its checkpoints with the new ones: give a new output directory, or delete that one first."
            )
        newest_step = checkpoint_step(self.checkpoints[-1]) if self.checkpoints else 0
        if newest_step > settings.preset.max_steps:
            raise SettingsError(
                f"{self.path} holds checkpoint-{newest_step}, past max_steps={settings.preset.max_steps}: give a "
                f"max_steps of at least {newest_step}, or average the checkpoints you want (`vanilla-transformer "
                "average`)."
            )
        if not earlier or self.record is None:
            return
        saved, new = self.record, settings.record()
        fixed = [name for name in new if name not in RESUMABLE_FIELDS] if self.checkpoints else TOKENIZER_FIELDS
        changed = [
            f"{name}: {saved.get(name)!r} -> {new[name]!r}"
            for name in fixed
            if name not in ("corpus", "run") and new[name] != saved.get(name)
        ]
        corpus = settings.corpus.change_from(saved.get("corpus"), saved.get("run", {}).get("corpus_sha256"))
        changed = ([corpus] if corpus else []) + changed
        if self.checkpoints and "run" in saved:
            # the corpus is compared above, the tokenizer by its fingerprint (`run.build_tokenizer`); a setting recorded
            # only since a run was started is not compared
            compared = [name for name in new["run"] if name in saved["run"]]
            changed += [
                f"{name}: {saved['run'][name]!r} -> {new['run'][name]!r}"
                for name in compared
                if name not in ("corpus_sha256", "tokenizer_path") and saved["run"][name] != new["run"][name]
            ]
        if changed:
            free = (
                f"only {', '.join(RESUMABLE_FIELDS)} may change"
                if self.checkpoints
                else f"it has no checkpoint yet: only {', '.join(TOKENIZER_FIELDS)}, which its tokenizer depends on, "
                "must stay"
            )
            raise SettingsError(
                f"{self.path} holds a run trained with other settings ({'; '.join(changed)}). Resume it with the "
                f"settings in {self.path / RUN_RECORD} ({free}), or give a new output directory."
            )

    def write_record(self, settings: TrainingSettings) -> None:
        """Write `settings.record()` to the folder's `preset.json` whole (`data.staging.atomic_file`)."""
        self.path.mkdir(parents=True, exist_ok=True)
        with atomic_file(self.path / RUN_RECORD) as staging:
            staging.write_text(json.dumps(settings.record(), indent=2) + "\n")

    @contextmanager
    def open(self, settings: TrainingSettings) -> Iterator[PartialState]:
        """Check the folder (`check`) on every process, before the process group exists so that all refuse alike;
        then, yielding the run's processes, hold it: the main process takes the lock and tells the others whether it
        could, so that a second run into the folder stops on all of them before it writes anything, and writes a new
        run's record, which the tokenizer saved next is checked against on a resume."""
        self.check(settings)
        # the processes of a distributed run (one without a GPU forms its group only when told it runs on the CPU)
        state = PartialState(cpu=not torch.cuda.is_available())
        with ExitStack() as held:
            refusal = None
            if state.is_main_process:
                self.path.mkdir(parents=True, exist_ok=True)
                try:
                    held.enter_context(hold_lock(self.path))
                except OutputError as error:
                    refusal = str(error)
            if state.num_processes > 1:
                from accelerate.utils import broadcast_object_list

                refusal = broadcast_object_list([refusal])[0]
            if refusal:
                raise OutputError(refusal)
            if state.is_main_process and self.record is None:
                self.write_record(settings)
            yield state


def same_setting(name: str, value: object, other: object) -> bool:
    """Whether two values of a preset field (as `preset.json` holds them) mean the same thing."""
    if name == "corpus" and value is not None and other is not None:
        return same_corpus(str(value), str(other))
    return value == other


def trainer_checkpoint_steps(
    max_steps: int, save_steps: int, existing: Iterable[int] = (), resume_step: int = 0
) -> list[int]:
    """The steps of the checkpoints a `Seq2SeqTrainer` run leaves before rotation: `existing`, every multiple of
    `save_steps` after `resume_step`, and `max_steps` itself, which transformers' `DefaultFlowCallback` saves."""
    steps = set(existing)
    if max_steps > resume_step:
        steps.update(range((resume_step // save_steps + 1) * save_steps, max_steps + 1, save_steps))
        steps.add(max_steps)
    return sorted(steps)


def checkpoint_problem(settings: TrainingSettings, folder: RunFolder) -> str | None:
    """Whether a Trainer run ends with the `average_last` checkpoints it averages, its own plus those of the run it
    resumes in `folder` (the counts were checked to be at least 1)."""
    preset = settings.preset
    existing = [checkpoint_step(path) for path in folder.checkpoints] if settings.resume else []
    resume_step = checkpoint_step(folder.resume_from) if settings.resume and folder.resume_from else 0
    wanted, every, last = preset.average_last, preset.save_steps, preset.max_steps
    steps = trainer_checkpoint_steps(last, every, existing, resume_step)
    if len(steps) >= wanted:
        return None
    names = ", ".join(f"checkpoint-{step}" for step in steps)
    earlier = f"; {len(existing)} of them already in {folder.path}" if existing else ""
    fixes = [flag("average_last", len(steps))]
    # the other ways out: checkpoints closer together, or more updates (a multiple of save_steps: evenly spaced)
    missing = wanted - len(existing)
    if missing <= last - resume_step:
        closer = (last - resume_step) // missing
        while closer > 0 and len(trainer_checkpoint_steps(last, closer, existing, resume_step)) < wanted:
            closer -= 1
        if closer:
            fixes.append(flag("save_steps", closer))
    longer = every * (missing + resume_step // every)
    while len(trainer_checkpoint_steps(longer, every, existing, resume_step)) < wanted:
        longer += every
    fixes.append(flag("max_steps", longer))
    return (
        f"{flag('average_last', wanted)} averages the last {wanted} checkpoints at the end, but "
        f"{flag('max_steps', last)} with {flag('save_steps', every)} leaves {len(steps)} ({names}{earlier}); give "
        f"{', '.join(fixes[:-1])} or {fixes[-1]}."
    )
