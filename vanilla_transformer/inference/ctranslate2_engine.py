"""The CTranslate2 engine (the optional extra `ctranslate2`): export a saved model folder, translate with the export.

CTranslate2's built-in sinusoid matches neither of our layouts (§3.5), so every export carries a table of
`max_positions` rows. Its length penalty divides by |Y|^α, so the GNMT one (§6.1) rescores the n-best list; unlike
our beam search, it stops a sentence once `num_beams` hypotheses have finished.
"""

import json
from pathlib import Path

import torch
from transformers import PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ..errors import CTranslate2Unavailable, ExportError, ModelFolderError
from ..files.loading import EXPORT_INFO, load_model_and_tokenizer
from ..files.outputs import check_not_an_input, check_output_folder, staged_folder
from ..model.generation_vanilla_transformer import gnmt_length_penalty
from ..model.modeling_vanilla_transformer import sinusoidal_position_encoding

# the weight types CTranslate2 converts to (`ctranslate2.converters.Converter.convert`)
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16", "int8_bfloat16")
MIN_POSITIONS = 1024
TOKENIZER_FOLDER = "tokenizer"  # beside CTranslate2's own config.json, which a tokenizer loader would misread


def import_ctranslate2():
    """The `ctranslate2` module, or an `ImportError` that says how to install it."""
    try:
        import ctranslate2
    except ImportError as error:
        raise CTranslate2Unavailable(
            'the CTranslate2 engine needs the ctranslate2 package: pip install "ctranslate2>=4.5" (or, in a checkout, '
            'pip install ".[ctranslate2]")'
        ) from error
    return ctranslate2


def vocabulary(tokenizer: PreTrainedTokenizerBase, size: int, side: str) -> list[str]:
    """The `size` token strings of one side's embedding rows, in id order, as CTranslate2 maps strings to ids; rows
    past the tokenizer's last id (never produced) get unique placeholder names."""
    count = len(tokenizer)
    if count > size:
        raise ExportError(
            f"the tokenizer has {count} tokens but the model's {side} vocabulary has {size} rows: export the folder "
            f"with the tokenizer the model was trained with."
        )
    tokens = tokenizer.convert_ids_to_tokens(list(range(count)))
    if any(not token for token in tokens):
        raise ExportError(f"the tokenizer has no token string for id {[not t for t in tokens].index(True)}.")
    taken = set(tokens)
    if len(taken) != len(tokens):
        raise ExportError("the tokenizer maps two ids to the same token string, which CTranslate2 cannot tell apart.")
    for index in range(count, size):
        filler = f"<unused_{index}>"
        while filler in taken:
            filler = f"<{filler}>"
        tokens.append(filler)
        taken.add(filler)
    return tokens


def model_spec(model: PreTrainedModel, source_vocabulary: list[str], target_vocabulary: list[str], max_positions: int):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights (float32, before quantization)."""
    from ctranslate2.converters.utils import fuse_linear
    from ctranslate2.specs import common_spec, transformer_spec

    activations = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,  # the exact (erf) GELU, as transformers' "gelu"
        "gelu_new": common_spec.Activation.GELUTanh,
        "silu": common_spec.Activation.SWISH,
        "swish": common_spec.Activation.SWISH,
    }
    config = model.config
    if config.activation_function not in activations:
        raise ExportError(
            f"activation_function={config.activation_function!r} has no CTranslate2 equivalent; it runs "
            f"{', '.join(activations)}."
        )
    for heads in (config.encoder_attention_heads, config.decoder_attention_heads):
        if config.d_model % heads or config.head_dims(heads) != (config.d_model // heads,) * 2:
            raise ExportError(
                f"d_k={config.head_dims(heads)[0]} and d_v={config.head_dims(heads)[1]} (qk_head_dim, v_head_dim) with "
                f"{heads} heads are not d_model / heads = {config.d_model / heads:g}, as CTranslate2 needs: translate "
                f"it with PyTorch."
            )
    # pre-LN: each stack ends in a LayerNorm, as ours; post-LN (the paper): none
    stack_options = {"pre_norm": config.normalize_before, "activation": activations[config.activation_function]}
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(config.encoder_layers, config.encoder_attention_heads, **stack_options),
        transformer_spec.TransformerDecoderSpec(config.decoder_layers, config.decoder_attention_heads, **stack_options),
    )

    def weights(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().to("cpu", torch.float32).contiguous().clone()

    def linear(target, module: torch.nn.Module) -> None:
        target.weight = weights(module.weight)
        if module.bias is not None:
            target.bias = weights(module.bias)

    def layer_norm(target, module: torch.nn.LayerNorm) -> None:
        target.gamma, target.beta = weights(module.weight), weights(module.bias)

    def attention(target, module: torch.nn.Module, cross: bool) -> None:
        projections = [common_spec.LinearSpec() for _ in range(3)]
        for projection, source in zip(projections, (module.q_proj, module.k_proj, module.v_proj), strict=True):
            linear(projection, source)
        if cross:  # queries from the decoder, keys and values from the encoder output
            fuse_linear(target.linear[0], projections[:1])
            fuse_linear(target.linear[1], projections[1:])
        else:
            fuse_linear(target.linear[0], projections)
        linear(target.linear[-1], module.out_proj)

    decoder = model.get_decoder()
    for stack_spec, stack in ((spec.encoder, model.get_encoder()), (spec.decoder, decoder)):
        stack_spec.scale_embeddings = float(stack.embed_scale)
        if config.position_encoding == "learned":
            positions = stack.embed_positions.weight
        else:
            interleaved = config.position_encoding == "sinusoidal"
            positions = sinusoidal_position_encoding(max_positions, config.d_model, interleaved)
        stack_spec.position_encodings.encodings = weights(positions)
        embeddings = stack_spec.embeddings[0] if isinstance(stack_spec.embeddings, list) else stack_spec.embeddings
        embeddings.weight = weights(stack.embed_tokens.weight)
        if config.normalize_before:
            layer_norm(stack_spec.layer_norm, stack.layer_norm)
        for layer_spec, layer in zip(stack_spec.layer, stack.layers, strict=True):
            attention(layer_spec.self_attention, layer.self_attn, cross=False)
            layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
            if stack is decoder:
                attention(layer_spec.attention, layer.encoder_attn, cross=True)
                layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
            linear(layer_spec.ffn.linear_0, layer.ffn.fc1)
            linear(layer_spec.ffn.linear_1, layer.ffn.fc2)
            layer_norm(layer_spec.ffn.layer_norm, layer.final_layer_norm)
    linear(spec.decoder.projection, model.get_output_embeddings())  # tied or not: CTranslate2 stores equal ones once

    spec.register_source_vocabulary(source_vocabulary)
    spec.register_target_vocabulary(target_vocabulary)
    eos_token_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    spec.config.layer_norm_epsilon = float(config.layer_norm_eps)  # else CTranslate2's own default
    spec.config.eos_token = target_vocabulary[eos_token_id]
    spec.config.bos_token = target_vocabulary[config.decoder_start_token_id]
    spec.config.decoder_start_token = target_vocabulary[config.decoder_start_token_id]
    spec.config.unk_token = target_vocabulary[config.pad_token_id]  # our byte-level BPE has no unknown token
    spec.config.add_source_bos = spec.config.add_source_eos = False  # the tokenizer adds </s> itself
    return spec


def export_ctranslate2(
    model_dir: str | Path,
    output_dir: str | Path,
    quantization: str = "float32",
    max_positions: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Export `model_dir` to a CTranslate2 model in `output_dir` (staged, then replacing it whole), with the tokenizer
    under `tokenizer/`, its decoding and origin in `export_info.json`, and a README. An `output_dir` that is, holds or
    lies inside `model_dir` is refused before any work, `overwrite` or not."""
    local = Path(model_dir).expanduser()
    check_not_an_input(output_dir, [("MODEL_DIR", local if local.is_dir() else None)], flag="OUTPUT_DIR")
    check_output_folder(output_dir, "ctranslate2", overwrite, flag="OUTPUT_DIR")
    ctranslate2 = import_ctranslate2()
    from ctranslate2.converters.converter import Converter

    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization={quantization!r} is not one of CTranslate2's: {', '.join(QUANTIZATIONS)}.")
    model, tokenizer = load_model_and_tokenizer(model_dir)
    config = model.config
    if config.position_encoding == "learned":  # a learned table is exported as it is
        max_positions = config.max_position_embeddings
    else:
        max_positions = max_positions or max(config.max_position_embeddings, MIN_POSITIONS)
    source = vocabulary(tokenizer, config.vocab_size, "source")
    target = vocabulary(tokenizer, config.decoder_vocab_size, "target")

    class VanillaTransformerConverter(Converter):
        def _load(self):
            return model_spec(model, source, target, max_positions)

    generation = model.generation_config
    info = {
        "exported_from": str(model_dir),
        "model_type": config.model_type,
        "quantization": quantization,
        "max_positions": max_positions,
        "ctranslate2_version": ctranslate2.__version__,
        "decoding": {
            "num_beams": generation.num_beams or 1,
            "length_penalty": generation.length_penalty,
            "length_penalty_form": getattr(generation, "length_penalty_form", "hf"),
            "max_new_tokens_over_input": getattr(generation, "max_new_tokens_over_input", None),
        },
    }
    with staged_folder(output_dir, "ctranslate2", "export-ctranslate2", overwrite, flag="OUTPUT_DIR") as staging:
        # the converter replaces the folder it is given: our own fresh staging folder, never `output_dir`
        VanillaTransformerConverter().convert(str(staging), quantization=quantization, force=True)
        tokenizer.save_pretrained(staging / TOKENIZER_FOLDER)
        (staging / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        (staging / "README.md").write_text(_readme(info, Path(output_dir).name), encoding="utf-8")
    return Path(output_dir)


def _readme(info: dict, name: str) -> str:
    decoding = info["decoding"]
    return (
        f"# {name}\n\n"
        f"A CTranslate2 export (weights: {info['quantization']}) of the vanilla_transformer model "
        f"`{info['exported_from']}`, made with ctranslate2 {info['ctranslate2_version']}. `{EXPORT_INFO}` records "
        f"what it was exported from and the decoding of its generation config: beam {decoding['num_beams']}, "
        f"length penalty {decoding['length_penalty_form']} α = {decoding['length_penalty']}, at most input length + "
        f"{decoding['max_new_tokens_over_input']} tokens.\n\n"
        f"    vanilla-transformer translate --engine ctranslate2 --model {name} --input source.txt\n\n"
        f"The tokenizer is in `{TOKENIZER_FOLDER}/`. Sentences and translations may have up to "
        f"{info['max_positions']} tokens (the positions the export holds); export again with `--max-positions` "
        f"for longer ones.\n"
    )


def load_ctranslate2(folder: str | Path, device: str = "cpu", threads: int = 0):
    """The `ctranslate2.Translator` of an export, its tokenizer and its `export_info.json`."""
    ctranslate2 = import_ctranslate2()
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    info_path = folder / EXPORT_INFO
    if not info_path.is_file() or not (folder / "model.bin").is_file():
        raise ModelFolderError(
            f"{folder} is not a CTranslate2 export of ours (no {EXPORT_INFO} or model.bin): make one with "
            f"`vanilla-transformer export-ctranslate2 {folder} {folder.name}-ctranslate2`."
        )
    if not (folder / TOKENIZER_FOLDER / "tokenizer.json").is_file():
        raise ModelFolderError(
            f"{folder / TOKENIZER_FOLDER} holds no tokenizer.json: export the model folder again, with its tokenizer."
        )
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda"):
        raise ExportError(f"--device {device}: CTranslate2 runs on cpu or cuda; use --engine pytorch for {kind}.")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    translator = ctranslate2.Translator(str(folder), device=kind, device_index=int(index or 0), intra_threads=threads)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder / TOKENIZER_FOLDER))
    return translator, tokenizer, info


def translate_with_ctranslate2(
    translator,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    info: dict,
    batch_size: int = 64,
    num_beams: int | None = None,
    length_penalty: float | None = None,
) -> list[str]:
    """`translation.translate` with an export's `translator` and the §6.1 decoding its `export_info.json` (`info`)
    records; `num_beams` and `length_penalty` override it.

    CTranslate2 takes one length limit per call, so each batch decodes up to its longest sentence's input + 50; a
    greedy translation past its own sentence's limit is cut there (exact: greedy choices do not depend on the
    limit), a beam search one is decoded again alone with its own limit."""
    decoding = info["decoding"]
    num_beams = num_beams or decoding.get("num_beams") or 1
    alpha = decoding.get("length_penalty") if length_penalty is None else length_penalty
    rescore = decoding.get("length_penalty_form") == "gnmt" and num_beams > 1
    over_input = decoding.get("max_new_tokens_over_input")
    max_positions = info["max_positions"]
    options = {"beam_size": num_beams, "min_decoding_length": 0, "return_end_token": True, "max_input_length": 0}
    options["length_penalty"] = 0.0 if rescore else alpha
    if rescore:  # the best of the n-best under ((5 + |Y|) / 6)^α, |Y| counting </s> as ours does
        options |= {"num_hypotheses": num_beams, "return_scores": True}

    def best(result) -> list[str]:
        if not rescore:
            return result.hypotheses[0]
        ranked = zip(result.hypotheses, result.scores, strict=True)
        return max(ranked, key=lambda pair: pair[1] / gnmt_length_penalty(len(pair[0]), alpha))[0]

    todo = [index for index, sentence in enumerate(sentences) if sentence.strip()]
    encoded = tokenizer([sentences[index] for index in todo], split_special_tokens=True)["input_ids"]
    tokens = {index: tokenizer.convert_ids_to_tokens(ids) for index, ids in zip(todo, encoded, strict=True)}
    limits = {}
    for index, sentence_tokens in tokens.items():
        if len(sentence_tokens) > max_positions:
            raise ExportError(
                f"sentence {index + 1} has {len(sentence_tokens)} tokens, more than the {max_positions} positions "
                f"the CTranslate2 export holds: export it again with a larger --max-positions."
            )
        # the paper's limit, input + 50 (§6.1), within the positions the export holds
        limits[index] = min(len(sentence_tokens) + over_input, max_positions) if over_input else max_positions
    translations = [""] * len(sentences)
    order = sorted(todo, key=lambda index: -len(tokens[index]))
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        limit = max(limits[index] for index in batch)
        results = translator.translate_batch([tokens[index] for index in batch], max_decoding_length=limit, **options)
        for index, result in zip(batch, results, strict=True):
            hypothesis = best(result)
            if len(hypothesis) > limits[index] and num_beams == 1:
                hypothesis = hypothesis[: limits[index]]
            elif len(hypothesis) > limits[index]:
                (result,) = translator.translate_batch([tokens[index]], max_decoding_length=limits[index], **options)
                hypothesis = best(result)
            translations[index] = tokenizer.decode(
                tokenizer.convert_tokens_to_ids(hypothesis), skip_special_tokens=True
            )
    return translations
