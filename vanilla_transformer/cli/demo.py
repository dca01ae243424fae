"""The README's main job: train the demo preset on the built-in En→De corpus, score it, package it.

Trains the `demo` preset (2+2 layers, d_model 128) with the paper's recipe (§5), scores held-out pairs with the
paper's decoding (§6.1), saves a Hub-ready folder, checks that it loads as remote code in a process without this
package, and translates real sentences with the released Multi30k checkpoint when the source checkout is at hand.

    vanilla-transformer demo [--output-dir outputs/demo] [--max-steps N]
"""

import argparse
import time
from pathlib import Path

from .arguments import int_in_range, output_dir

# the release folder lives in the source checkout beside the package; an installed wheel does not carry its weights
RELEASE = Path(__file__).resolve().parents[2] / "model_cards" / "vanilla-transformer-multi30k-en-de"
REAL_SENTENCES = [
    "A man in a blue shirt is riding a bike down the street.",
    "Two young girls are playing with a dog in the park.",
    "A woman is reading a book on a bench.",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..training.presets import TRAINING_PRESETS

    # the demo averages its last checkpoints, and saves at most one per update
    least = TRAINING_PRESETS["demo"].average_last
    parser.add_argument(
        "--output-dir", default="outputs/demo", type=output_dir, help="where the run and its final folder go"
    )
    parser.add_argument(
        "--max-steps",
        type=int_in_range(least, fix=f"give {least} or more, one update per checkpoint the demo averages"),
        help="shorter or longer than the demo preset's updates",
    )


def run(args: argparse.Namespace) -> None:
    run_demo(args.output_dir, args.max_steps)


def run_demo(output_dir: str, max_steps: int | None = None, release: str | Path = RELEASE) -> dict:
    """Train, evaluate and package the demo model under `output_dir`; return the held-out scores."""
    from dataclasses import replace

    from ..data.corpora import load_builtin
    from ..files.loading import load_model_and_tokenizer
    from ..inference.plots import plot_learning_curves
    from ..inference.scoring import score_translations
    from ..inference.translation import translate
    from ..release.remote_code import generate_without_package
    from ..training.presets import get_training_preset
    from ..training.run import train
    from ..training.settings import TrainingSettings

    start = time.perf_counter()
    preset = get_training_preset("demo")
    if max_steps is not None:
        preset = replace(preset, max_steps=max_steps, save_steps=max(1, max_steps // preset.average_last))
    result = train(TrainingSettings(preset, output_dir))
    curves = plot_learning_curves(result.log_history, Path(output_dir) / "curves.png")
    trained = time.perf_counter() - start
    print(f"trained {preset.max_steps} steps in {trained:.0f}s; curves in {curves}")

    model, tokenizer = load_model_and_tokenizer(result.final_dir)
    test = load_builtin("test")["translation"]
    sources, references = [p["en"] for p in test], [p["de"] for p in test]
    hypotheses = translate(model, tokenizer, sources, batch_size=100)  # the paper's beam 4, GNMT penalty, input+50
    scores = score_translations(hypotheses, references)
    print(
        f"held-out built-in pairs ({len(test)}): BLEU {scores['bleu']['score']:.1f}, chrF {scores['chrf']['score']:.1f}"
        f"  [{scores['bleu']['signature']}]"
    )
    for source, hypothesis in list(zip(sources, hypotheses, strict=True))[:3]:
        print(f"  {source}  →  {hypothesis}")

    inputs = tokenizer(sources[:4], return_tensors="pt", padding=True)
    local = model.generate(**inputs).tolist()
    remote = generate_without_package(result.final_dir, dict(inputs))
    if remote != local:
        raise RuntimeError(f"{result.final_dir} loaded as remote code translates differently: {remote} != {local}")
    print(f"Hub-ready folder {result.final_dir}: loads with trust_remote_code in a process without this package")

    release = Path(release)
    if (release / "model.safetensors").is_file():
        print(f"the released Multi30k model ({release.name}) on real sentences:")
        released = translate(*load_model_and_tokenizer(release), REAL_SENTENCES)
        for source, hypothesis in zip(REAL_SENTENCES, released, strict=True):
            print(f"  {source}  →  {hypothesis}")
    else:
        print(
            f"skipped translating real sentences with the released Multi30k model: {release} has no "
            f"model.safetensors (it ships with the source checkout, not the package)"
        )
    print(f"done in {time.perf_counter() - start:.0f}s")
    return scores
