"""Pictures: learning curves of a run, and attention maps like the paper's Figures 3-5."""

from pathlib import Path

import torch
from matplotlib.figure import Figure  # not pyplot: no backend is chosen or changed, so notebooks keep theirs

from ..errors import VanillaTransformerError


def plot_learning_curves(log_history: list[dict], path: str | Path) -> Path:
    """Training loss, validation loss and validation BLEU against the update step, from `trainer.state.log_history`."""
    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e and "step" in e]
    valid = [(e["step"], e["eval_loss"]) for e in log_history if "eval_loss" in e]
    bleu = [(e["step"], e["eval_bleu"]) for e in log_history if "eval_bleu" in e]
    if not train and not valid:
        raise VanillaTransformerError("the log history holds no losses; train with logging_steps > 0 first.")
    figure = Figure(figsize=(11, 4))
    loss_axis, bleu_axis = figure.subplots(1, 2)
    for points, label in ((train, "train (label-smoothed)"), (valid, "valid")):
        if points:
            loss_axis.plot(*zip(*points, strict=True), label=label, marker="." if len(points) < 30 else None)
    loss_axis.set(xlabel="update step", ylabel="cross-entropy", title="loss")
    loss_axis.legend()
    if bleu:
        bleu_axis.plot(*zip(*bleu, strict=True), marker="o", color="tab:green")
    bleu_axis.set(xlabel="update step", ylabel="sacreBLEU", title="validation BLEU")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return Path(path)


@torch.inference_mode()
def attention_maps(model, tokenizer, source: str, target: str | None = None) -> dict:
    """Encoder self-attention and encoder-decoder attention weights for one sentence pair (`target` defaults to
    the model's own translation), as `{"encoder": [layer](heads, src, src), "cross": [layer](heads, tgt, src)}`
    plus the token strings."""
    inputs = tokenizer(source, return_tensors="pt", split_special_tokens=True).to(model.device)
    if target is None:
        target = tokenizer.decode(model.generate(**inputs)[0], skip_special_tokens=True)
    labels = tokenizer(text_target=target, return_tensors="pt", split_special_tokens=True)["input_ids"].to(model.device)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")  # sdpa returns no weights
    try:
        outputs = model(**inputs, decoder_input_ids=decoder_input_ids, output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    return {
        "encoder": [a[0].float().cpu() for a in outputs.encoder_attentions],
        "cross": [a[0].float().cpu() for a in outputs.cross_attentions],
        "source_tokens": tokenizer.convert_ids_to_tokens(inputs["input_ids"][0]),
        "target_tokens": tokenizer.convert_ids_to_tokens(decoder_input_ids[0]),
    }


def _readable(tokens: list[str]) -> list[str]:
    # byte-level BPE marks a leading space with "Ġ" and stores UTF-8 bytes as symbols; show the text instead
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_of = {symbol: byte for byte, symbol in bytes_to_unicode().items()}
    readable = []
    for token in tokens:
        try:
            readable.append(bytes(byte_of[c] for c in token).decode("utf-8"))
        except (KeyError, UnicodeDecodeError):
            readable.append(token)
    return readable


def plot_attention(maps: dict, kind: str, layers: list[int], heads: list[int], path: str | Path) -> Path:
    """A grid of heat maps (rows: layers, columns: heads) of `kind` = "encoder" or "cross" attention."""
    if kind not in ("encoder", "cross"):
        raise VanillaTransformerError(f"kind={kind!r} is unknown; use 'encoder' or 'cross'.")
    stack = maps[kind]
    for layer in layers:
        if not 0 <= layer < len(stack):
            raise VanillaTransformerError(f"layer {layer} does not exist; the model has layers 0..{len(stack) - 1}.")
    for head in heads:
        if not 0 <= head < len(stack[0]):
            raise VanillaTransformerError(f"head {head} does not exist; the model has heads 0..{len(stack[0]) - 1}.")
    rows = _readable(maps["source_tokens"] if kind == "encoder" else maps["target_tokens"])
    columns = _readable(maps["source_tokens"])
    figure = Figure(figsize=(0.35 * len(columns) * len(heads) + 2, 0.35 * len(rows) * len(layers) + 1))
    axes = figure.subplots(len(layers), len(heads), squeeze=False)
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            axis = axes[i][j]
            # colours scaled per map, so that diffuse heads stay readable
            axis.imshow(stack[layer][head].numpy(), cmap="viridis", vmin=0.0)
            axis.set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
            axis.set_yticks(range(len(rows)), rows, fontsize=7)
            axis.set_title(f"{kind} layer {layer} head {head}", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return Path(path)
