"""The data pipeline at the paper's scale: a synthetic WMT14-shaped corpus of N pairs, trained on from raw text as a
user would (`vanilla-transformer train` in a process of its own), timed and its memory watched.

What is measured, per N: the **cold start** (raw text → the first batch and the first update: the tokenizer learned,
the corpus tokenized into the cache), the **restart** to one more update (from the checkpoint, opening the cache);
the peak RSS of the training process and its workers (sampled every
0.25 s); the caches' size on disk; and the Trainer's `DataLoader`'s own rate in source+target tokens per second,
beside the tokens per second the model's first update consumed.

The synthetic corpus has newstest2014's sentence lengths: English words per sentence log-normal with the log-mean
and log-sd of newstest2014.en (2.85, 0.54: mean 19.8 words), German length the English one times a normal ratio of
newstest2014's mean and sd (0.93, 0.19), words drawn from a Zipf distribution (exponent 1) over 50,000 made-up
words of 1-14 letters per language; nothing of the real corpus is copied.
"""

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import psutil

from . import lab_process

# newstest2014 (3003 pairs): log of English words per sentence, and German/English word ratio
WORDS_LOG_MEAN, WORDS_LOG_SD = 2.85, 0.54
RATIO_MEAN, RATIO_SD = 0.93, 0.19
MAX_WORDS = 150
VOCABULARY_WORDS = 50_000
VALID_PAIRS = 3000
CHUNK_PAIRS = 200_000
EVAL_SAMPLES = 16  # validation pairs the runs decode (validation speed is not what is measured)
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyzäöüß"))


def _vocabulary(rng: np.random.Generator, letters: int) -> np.ndarray:
    lengths = np.clip(rng.poisson(5.5, VOCABULARY_WORDS) + 1, 1, 14)
    return np.array(["".join(rng.choice(LETTERS[:letters], size=n)) for n in lengths], dtype=object)


def write_synthetic_corpus(folder: Path, pairs: int, seed: int = 0) -> dict:
    """`train.*` of `pairs` pairs and `valid.*` of `VALID_PAIRS` pairs in `folder`; the mean words per sentence."""
    rng = np.random.default_rng(seed)
    vocabularies = {"en": _vocabulary(rng, 26), "de": _vocabulary(rng, 30)}
    zipf = 1.0 / np.arange(1, VOCABULARY_WORDS + 1)
    zipf /= zipf.sum()
    folder.mkdir(parents=True, exist_ok=True)
    words = {"en": 0, "de": 0}
    for split, total in (("train", pairs), ("valid", VALID_PAIRS)):
        with ExitStack() as stack:
            handles = {
                lang: stack.enter_context(open(folder / f"{split}.{lang}", "w", encoding="utf-8")) for lang in words
            }
            for start in range(0, total, CHUNK_PAIRS):
                n = min(CHUNK_PAIRS, total - start)
                english = np.clip(np.rint(np.exp(rng.normal(WORDS_LOG_MEAN, WORDS_LOG_SD, n))), 1, MAX_WORDS)
                german = np.clip(np.rint(english * rng.normal(RATIO_MEAN, RATIO_SD, n)), 1, MAX_WORDS)
                for lang, lengths in (("en", english.astype(int)), ("de", german.astype(int))):
                    tokens = vocabularies[lang][rng.choice(VOCABULARY_WORDS, size=int(lengths.sum()), p=zipf)]
                    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
                    spans = zip(bounds[:-1], bounds[1:], strict=True)
                    handles[lang].write("".join(" ".join(tokens[a:b]).capitalize() + " .\n" for a, b in spans))
                    if split == "train":
                        words[lang] += int(lengths.sum())
    return {f"words_per_sentence_{lang}": count / max(pairs, 1) for lang, count in words.items()}


class _Watch:
    """The peak RSS of a process and of each of its descendants, sampled every `interval` seconds (a peak shorter
    than that can pass unseen)."""

    def __init__(self, pid: int, interval: float = 0.25):
        self.root = psutil.Process(pid)
        self.peaks: dict[int, tuple[str, int]] = {}
        self.main_anonymous = 0
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                processes = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for process in processes:
                try:
                    memory = process.memory_info()
                    rss = memory.rss
                    name = "main" if process.pid == self.root.pid else " ".join(process.cmdline()[:3])[-60:]
                except psutil.Error:
                    continue
                if rss > self.peaks.get(process.pid, ("", 0))[1]:
                    self.peaks[process.pid] = (name, rss)
                if process.pid == self.root.pid:
                    # resident pages not backed by a file: what the process allocated, without the pages of the
                    # memory-mapped tables it has read (counted in RSS, but the kernel's to drop and share)
                    self.main_anonymous = max(self.main_anonymous, rss - memory.shared)
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        main = self.peaks.pop(self.root.pid, ("main", 0))[1]
        others = sorted((rss for _, rss in self.peaks.values()), reverse=True)
        return {
            "main_peak_rss_gb": main / 1e9,
            "main_peak_anonymous_gb": self.main_anonymous / 1e9,
            "other_processes": len(others),
            "other_peak_rss_gb": others[0] / 1e9 if others else 0.0,
        }


def run_timed(command: list[str], env: dict, marks: dict[str, str], log: Path) -> dict:
    """Run `command`, its output into `log`, noting the seconds at which a line of its output first matches each of
    `marks` (name → regex), its processes' peak RSS and the main process's peak up to each mark."""
    start = time.perf_counter()
    seen: dict[str, float] = {}
    lines: dict[str, str] = {}
    peaks: dict[str, float] = {}  # the main process's peak up to each mark: before the first batch, the data's
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        watch = _Watch(process.pid)
        for line in process.stdout:
            out.write(line)
            for name, pattern in marks.items():
                if name not in seen and re.search(pattern, line):
                    seen[name] = time.perf_counter() - start
                    lines[name] = line.strip()
                    peaks[f"main_peak_rss_at_{name}_gb"] = watch.peaks.get(watch.root.pid, ("main", 0))[1] / 1e9
                    peaks[f"main_peak_anonymous_at_{name}_gb"] = watch.main_anonymous / 1e9
        status = process.wait()
        memory = watch.stop()
    if status:
        raise RuntimeError(f"{' '.join(command)} failed ({status}); its output is in {log}")
    times = {f"{name}_s": seconds for name, seconds in seen.items()}
    return {**times, "total_s": time.perf_counter() - start, **memory, **peaks, "lines": lines}


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.exists() else 0


def loader_rate(corpus: Path, output: Path, preset_name: str, max_tokens: int, batches: int = 200) -> dict:
    """Source+target tokens per second the training loop's loader delivers from the cached corpus (the run in
    `output` built it): the token-budget sampler and `DataCollatorForSeq2Seq` over the memory-mapped table."""
    from dataclasses import replace

    from accelerate import PartialState
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForSeq2Seq

    from vanilla_transformer.data.batching import TokenBudgetBatchSampler
    from vanilla_transformer.data.tokenized import model_columns
    from vanilla_transformer.training.presets import TRAINING_PRESETS
    from vanilla_transformer.training.run import prepare_run_data
    from vanilla_transformer.training.run_folder import RunFolder
    from vanilla_transformer.training.settings import TrainingSettings

    from .benchmark import status_kib

    preset = replace(TRAINING_PRESETS[preset_name], corpus=str(corpus), valid_split="valid", max_tokens=max_tokens)
    start = time.perf_counter()
    settings = TrainingSettings(preset, output, "en", "de", eval_samples=EVAL_SAMPLES)
    data = prepare_run_data(PartialState(cpu=True), settings, RunFolder.read(output))
    sampler = TokenBudgetBatchSampler.for_dataset(data.train_set, max_tokens)
    opened = time.perf_counter() - start
    collator = DataCollatorForSeq2Seq(data.tokenizer, label_pad_token_id=-100)
    loader = DataLoader(model_columns(data.train_set), batch_sampler=sampler, collate_fn=collator)
    sources = targets = 0
    start = time.perf_counter()
    for index, batch in enumerate(loader):
        sources += int(batch["attention_mask"].sum())
        targets += int((batch["labels"] != -100).sum())
        if index + 1 == batches:
            break
    seconds = time.perf_counter() - start
    return {
        # this process holds the data alone (no model): the loader's own memory
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "anonymous_rss_gb_at_end": status_kib("RssAnon") * 1024 / 1e9,
        "open_and_sample_s": opened,
        "tokens_per_s": (sources + targets) / seconds,
        "target_tokens_per_s": targets / seconds,
        "batches": index + 1,
    }


def prepare_workdir(workdir: Path) -> None:
    """Make `workdir` benchmark-data's own (a new or empty folder is marked, one it marked before is reused), or
    refuse it before anything is written: every call replaces the runs, caches and logs in it."""
    from vanilla_transformer.files.outputs import check_output_folder, write_marker

    check_output_folder(workdir, "benchmark-data", flag="--workdir")
    workdir.mkdir(parents=True, exist_ok=True)
    write_marker(workdir, "benchmark-data", "benchmark-data")


def benchmark_data(
    pairs: int,
    workdir: Path,
    preset: str = "paper-base",
    extra_flags: tuple[str, ...] = (),
) -> dict:
    """The module docstring's measurements for a synthetic corpus of `pairs` pairs, in `workdir` (the corpus is kept
    there for a later call; the runs, caches and logs are made anew)."""
    from vanilla_transformer.training.presets import TRAINING_PRESETS

    run, caches, logs = workdir / f"run-{pairs}", workdir / f"caches-{pairs}", workdir / f"logs-{pairs}"
    corpus = workdir / f"corpus-{pairs}"
    shape = {}
    if not (corpus / "valid.de").is_file():
        shutil.rmtree(corpus, ignore_errors=True)  # one an earlier call was killed writing
        started = time.perf_counter()
        shape = write_synthetic_corpus(corpus, pairs)
        shape["write_corpus_s"] = time.perf_counter() - started
    for folder in (run, caches, logs):
        shutil.rmtree(folder, ignore_errors=True)
    logs.mkdir()
    env = {
        **os.environ,
        "HF_DATASETS_CACHE": str(caches / "datasets"),
        "VANILLA_TRANSFORMER_TOKENIZED_CACHE": str(caches / "tokenized"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",  # each line when printed: its time is what is measured
    }
    flags = ["--preset", preset, "--corpus", str(corpus), "--valid-split", "valid", "--save-steps", "1"]
    flags += ["--average-last", "1", "--eval-samples", str(EVAL_SAMPLES), "--log-steps", "1", "--report-to", "none"]
    command = [sys.executable, "-m", "vanilla_transformer", "train", *flags, *extra_flags, "--output-dir", str(run)]
    update = r"\{'loss': "  # the Trainer's log line of an update (--log-steps 1)
    marks = {"first_batch": r"parameters; ", "first_update": update}
    report = {"pairs": pairs, "preset": preset, "flags": list(extra_flags), **shape}
    report["cold"] = run_timed([*command, "--max-steps", "1"], env, marks, logs / "cold.log")
    report["cache_bytes"] = {
        "datasets_arrow": folder_bytes(caches / "datasets"),
        "tokenized": folder_bytes(caches / "tokenized"),
    }
    restart_marks = {"resumed": r"^resuming from", "next_update": update}
    report["restart"] = run_timed([*command, "--max-steps", "2"], env, restart_marks, logs / "restart.log")
    # in a process of its own: the caches are found through the environment `datasets` reads when imported
    max_tokens = _flag(extra_flags, "--max-tokens") or TRAINING_PRESETS[preset].max_tokens
    loader, loader_env = lab_process("data_benchmark", str(corpus), str(run), preset, str(max_tokens), env=env)
    output = subprocess.run(loader, env=loader_env, check=True, capture_output=True, text=True).stdout
    report["loader"] = json.loads(output.strip().splitlines()[-1])
    # the run's first line: real tokens per batch on average, and batches per update
    summary = report["cold"]["lines"].get("first_batch", "")
    batch = re.search(r"\((\d+) real on average", summary)
    batches = re.search(r"(\d+) batch\(es\) per process and update", summary)
    if batch and batches and "first_update_s" in report["cold"]:
        seconds = report["cold"]["first_update_s"] - report["cold"]["first_batch_s"]
        report["model_tokens_per_s"] = int(batch.group(1)) * int(batches.group(1)) / seconds
        report["loader_over_model"] = report["loader"]["tokens_per_s"] / report["model_tokens_per_s"]
    return report


def _flag(flags: tuple[str, ...], name: str) -> int | None:
    return int(flags[flags.index(name) + 1]) if name in flags else None


if __name__ == "__main__":  # `benchmark_data`'s loader measurement: corpus, run folder, preset, max tokens
    print(json.dumps(loader_rate(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))))
