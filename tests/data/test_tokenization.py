import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from vanilla_transformer.data.text import read_lines
from vanilla_transformer.data.tokenization import (
    LOAD_TIME_KEYS,
    load_tokenizer,
    lowercases,
    round_trip_failures,
    tokenizer_fingerprint,
    train_joint_bpe,
)

RELEASE = Path(__file__).resolve().parents[2] / "model_cards" / "vanilla-transformer-multi30k-en-de"
# the fingerprint of the released tokenizer: the same under transformers 5.15 and 5.24 (CI runs both), and with
# tokenizers' merges stored as pairs (>= 0.20) or as "a b" strings
RELEASE_FINGERPRINT = "dc121fad916732881b3a3a9821baed009c1997ef4acb111e7315f629657fe7ce"

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
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
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
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in ["Ein Mann fährt ÜBER die Straße.", "ZWEI Äpfel"]:
        assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text.lower()
        assert loaded(text)["input_ids"] == loaded(text.lower())["input_ids"]
    assert lowercases(loaded) and not lowercases(train_joint_bpe(texts, vocab_size=400))
    assert round_trip_failures(loaded, texts) == []
    # every merge learned is lowercase text (the byte alphabet, single symbols, holds upper-case letters as any other)
    merged = [loaded.convert_tokens_to_string([t]) for t in loaded.get_vocab() if len(t) > 1 and t[0] != "<"]
    assert merged and not [text for text in merged if text != text.lower()]


def test_a_loaded_tokenizer_saved_again_writes_only_its_own_settings(builtin_tokenizer, tmp_path):
    first = tmp_path / "first"
    builtin_tokenizer.save_pretrained(first)
    for name, loader in (("auto", AutoTokenizer.from_pretrained), ("ours", load_tokenizer)):
        loader(first, local_files_only=True).save_pretrained(tmp_path / name)
    # transformers records how a tokenizer was loaded and writes it out again; our loader forgets it
    written = json.loads((tmp_path / "auto" / "tokenizer_config.json").read_text())
    assert set(LOAD_TIME_KEYS) <= set(written), "transformers no longer saves load-time keys: drop load_tokenizer"
    ours = json.loads((tmp_path / "ours" / "tokenizer_config.json").read_text())
    assert not set(LOAD_TIME_KEYS) & set(ours)
    assert ours == {key: value for key, value in written.items() if key not in LOAD_TIME_KEYS}


def test_the_fingerprint_survives_saving_and_loading(builtin_tokenizer, tmp_path):
    expected = tokenizer_fingerprint(builtin_tokenizer)
    assert len(expected) == 64 and int(expected, 16) >= 0
    first = tmp_path / "first"
    builtin_tokenizer.save_pretrained(first)
    assert tokenizer_fingerprint(load_tokenizer(first)) == expected
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(first)) == expected
    AutoTokenizer.from_pretrained(first).save_pretrained(tmp_path / "again")  # with transformers' load-time keys
    assert tokenizer_fingerprint(load_tokenizer(tmp_path / "again")) == expected
    assert tokenizer_fingerprint(load_tokenizer(RELEASE)) == RELEASE_FINGERPRINT


def test_merges_as_strings_give_the_same_fingerprint(builtin_tokenizer, tmp_path):
    """tokenizers before 0.20 wrote each merge as one string "a b"; newer ones read both."""
    builtin_tokenizer.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
    (tmp_path / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    assert tokenizer_fingerprint(load_tokenizer(tmp_path)) == tokenizer_fingerprint(builtin_tokenizer)


def _edited_copy(source, target, edit) -> str:
    shutil.copytree(source, target)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        data = json.loads((target / name).read_text(encoding="utf-8"))
        edit(name, data)
        (target / name).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return tokenizer_fingerprint(load_tokenizer(target))


def test_the_fingerprint_changes_with_what_the_ids_mean(builtin_tokenizer, tmp_path):
    saved = tmp_path / "saved"
    builtin_tokenizer.save_pretrained(saved)
    fingerprints = {tokenizer_fingerprint(builtin_tokenizer)}

    # another run's tokenizer: other text, same special-token ids
    other = train_joint_bpe(["Ein Mann fährt Rad.", "Zwei Hunde spielen im Schnee."] * 10, vocab_size=300)
    fingerprints.add(tokenizer_fingerprint(other))

    def swap_two_ids(name, data):  # the same tokens, two of them with each other's id
        if name == "tokenizer.json":
            vocab = data["model"]["vocab"]
            first, second = sorted(vocab, key=vocab.get)[300:302]
            vocab[first], vocab[second] = vocab[second], vocab[first]

    def pad_is_unk(name, data):  # the same vocabulary, another padding token
        if name == "tokenizer_config.json":
            data["pad_token"] = "<unk>"

    def merges_reordered(name, data):  # the same vocabulary, merges in another order: other segmentations
        if name == "tokenizer.json":
            data["model"]["merges"] = data["model"]["merges"][::-1]

    def max_length_changed(name, data):  # not what the ids mean
        if name == "tokenizer_config.json":
            data["model_max_length"] = 17

    for edit in (swap_two_ids, pad_is_unk, merges_reordered):
        fingerprints.add(_edited_copy(saved, tmp_path / edit.__name__, edit))
    assert len(fingerprints) == 5
    assert _edited_copy(saved, tmp_path / "max_length", max_length_changed) == tokenizer_fingerprint(builtin_tokenizer)
