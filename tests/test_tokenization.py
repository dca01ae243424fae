import json

import pytest
from transformers import AutoTokenizer

from vanilla_transformer.data.corpora import read_lines
from vanilla_transformer.tokenization import (
    LOAD_TIME_KEYS,
    load_tokenizer,
    lowercases,
    round_trip_failures,
    save_tokenizer,
    train_joint_bpe,
)

ENGLISH_CHINESE = [
    ("The cat sits on the mat.", "猫坐在垫子上。"),
    ("I like green tea very much.", "我非常喜欢绿茶。"),
    ("Where is the train station?", "火车站在哪里？"),
    ("Two children are playing in the park.", "两个孩子在公园里玩。"),
    ("The weather is nice today.", "今天天气很好。"),
    ("She reads a book every evening.", "她每天晚上读一本书。"),
]


def test_round_trip_every_multi30k_training_line(multi30k, tmp_path):
    texts = read_lines(multi30k / "train.en") + read_lines(multi30k / "train.de")
    tokenizer = train_joint_bpe(texts, vocab_size=8000)
    assert len(tokenizer) == 8000
    assert round_trip_failures(tokenizer, texts) == []
    # AutoTokenizer loads the saved folder with the model's special-token ids
    loaded = AutoTokenizer.from_pretrained(save_tokenizer(tokenizer, tmp_path))
    ids = {name: getattr(loaded, f"{name}_token_id") for name in ("pad", "bos", "eos", "unk")}
    assert ids == {"pad": 0, "bos": 1, "eos": 2, "unk": 3}
    encoded = loaded("Ein Hund läuft.")["input_ids"]
    assert encoded[-1] == 2 and loaded.decode(encoded, skip_special_tokens=True) == "Ein Hund läuft."
    # a shared BPE learns sub-words, not characters: German sentences take a few tokens per word
    assert len(loaded(texts[-1])["input_ids"]) < 2 * len(texts[-1].split()) + 1


def test_languages_without_spaces_round_trip():
    texts = [text for pair in ENGLISH_CHINESE for text in pair] * 3
    tokenizer = train_joint_bpe(texts, vocab_size=400, min_frequency=2)
    chinese = [zh for _, zh in ENGLISH_CHINESE] + ["我们明天去北京。"]  # unseen characters too
    assert round_trip_failures(tokenizer, chinese) == []
    tokens = tokenizer.tokenize(ENGLISH_CHINESE[0][1])
    assert 1 < len(tokens) < len(ENGLISH_CHINESE[0][1].encode("utf-8"))  # merged, but not one blob


def test_vocabulary_too_small_is_an_error():
    with pytest.raises(ValueError, match="cannot hold the 4 special tokens and the 256 byte symbols"):
        train_joint_bpe(["a b c"], vocab_size=100)


def test_empty_training_text_is_an_error():
    with pytest.raises(ValueError, match="training text is empty"):
        train_joint_bpe(["", ""], vocab_size=1000)


def test_a_lowercasing_tokenizer_lowercases_every_text_and_keeps_doing_so_when_loaded(tmp_path):
    texts = ["Ein Mann fährt ÜBER die Straße.", "A man drives across the street.", "Zwei Hunde spielen."] * 20
    tokenizer = train_joint_bpe(texts, vocab_size=400, lowercase=True)
    loaded = AutoTokenizer.from_pretrained(save_tokenizer(tokenizer, tmp_path))
    for text in ["Ein Mann fährt ÜBER die Straße.", "ZWEI Äpfel"]:
        assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text.lower()
        assert loaded(text)["input_ids"] == loaded(text.lower())["input_ids"]
    assert lowercases(loaded) and not lowercases(train_joint_bpe(texts, vocab_size=400))
    assert round_trip_failures(loaded, texts) == []
    # every merge learned is lowercase text (the byte alphabet, single symbols, holds upper-case letters as any other)
    merged = [loaded.convert_tokens_to_string([t]) for t in loaded.get_vocab() if len(t) > 1 and t[0] != "<"]
    assert merged and not [text for text in merged if text != text.lower()]


def test_a_loaded_tokenizer_saved_again_writes_only_its_own_settings(builtin_tokenizer, tmp_path):
    first = save_tokenizer(builtin_tokenizer, tmp_path / "first")
    for name, loader in (("auto", AutoTokenizer.from_pretrained), ("ours", load_tokenizer)):
        loader(first, local_files_only=True).save_pretrained(tmp_path / name)
    # transformers records how a tokenizer was loaded and writes it out again; our loader forgets it
    written = json.loads((tmp_path / "auto" / "tokenizer_config.json").read_text())
    assert set(LOAD_TIME_KEYS) <= set(written), "transformers no longer saves load-time keys: drop load_tokenizer"
    ours = json.loads((tmp_path / "ours" / "tokenizer_config.json").read_text())
    assert not set(LOAD_TIME_KEYS) & set(ours)
    assert ours == {key: value for key, value in written.items() if key not in LOAD_TIME_KEYS}
