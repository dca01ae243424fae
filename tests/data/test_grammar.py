"""The En→De grammar corpus: deterministic, distinct, well-formed pairs, and German that agrees in gender, case and
number (checked against hand-written translations)."""

import pytest

from vanilla_transformer.data import grammar
from vanilla_transformer.data.grammar import MAX_PAIRS, NounPhrase, Sentence, grammar_pairs, render


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, str]]:
    return grammar_pairs(5000, seed=0)


def test_same_seed_gives_identical_pairs(corpus):
    assert grammar_pairs(5000, seed=0) == corpus


def test_different_seed_gives_different_pairs(corpus):
    other = grammar_pairs(5000, seed=1)
    assert other != corpus
    assert len(set(other) & set(corpus)) < 500  # not a reordering of the same sentences


def test_exact_count_and_distinct_english(corpus):
    assert len(corpus) == 5000
    assert len({english for english, _ in corpus}) == 5000
    assert grammar_pairs(0) == []
    assert len(grammar_pairs(1, seed=3)) == 1


def test_shorter_request_is_a_prefix(corpus):
    assert grammar_pairs(100, seed=0) == corpus[:100]


@pytest.mark.parametrize("num_pairs", [MAX_PAIRS + 1, -1])
def test_out_of_range_request_raises_naming_number_and_maximum(num_pairs):
    with pytest.raises(ValueError, match=rf"Cannot generate {num_pairs} .*{MAX_PAIRS}"):
        grammar_pairs(num_pairs)


def test_running_out_of_distinct_sentences_raises(monkeypatch):
    # A grammar with a single sentence can give one pair but never two distinct ones.
    only_sentence = Sentence((NounPhrase("dog"),), "see", NounPhrase("ball"))
    monkeypatch.setattr(grammar, "_sample_sentence", lambda rng: only_sentence)
    assert grammar_pairs(1) == [("The dog sees the ball.", "Der Hund sieht den Ball.")]
    with pytest.raises(ValueError, match=r"Found only 1 distinct grammar pairs .* 2 were asked for"):
        grammar_pairs(2)


def test_every_pair_is_a_well_formed_sentence(corpus):
    for english, german in corpus:
        for text in (english, german):
            assert text and text[0].isupper() and text.endswith(".")
            assert text.count(".") == 1 and "  " not in text and text == text.strip()
            assert 5 <= len(text.split()) <= 16, text
            assert not text.split()[-1] == "."  # the full stop is attached to the last word


def test_corpus_vocabulary_is_small(corpus):
    english_words = {word for english, _ in corpus for word in english.split()}
    german_words = {word for _, german in corpus for word in german.split()}
    assert len(english_words) < 300
    assert len(german_words) < 300


def test_corpus_exercises_every_construction(corpus):
    german_words = {word for _, german in corpus for word in german.split()}
    english_words = {word for english, _ in corpus for word in english.split()}
    assert {"im", "am", "und", "zwei", "drei", "für", "ohne", "mit", "einen", "einem", "einer"} <= german_words
    assert {"Hunden.", "Kindern.", "kleiner", "kleines", "kleinen"} <= german_words
    assert {"an", "next", "and"} <= english_words
    # Contractions replace "in dem" / "an dem" everywhere.
    assert not any(" in dem " in german or " an dem " in german for _, german in corpus)


def _pair(subjects, verb, direct_object, preposition=None, prepositional_object=None) -> tuple[str, str]:
    return render(Sentence(tuple(subjects), verb, direct_object, preposition, prepositional_object))


THE, A = "the", "a"
HAND_WRITTEN_TRANSLATIONS = [
    # nominative masculine weak, accusative masculine mixed, dative masculine contraction
    (
        _pair([NounPhrase("dog", THE, "small")], "see", NounPhrase("ball", A, "red"), "in", NounPhrase("garden")),
        ("The small dog sees a red ball in the garden.", "Der kleine Hund sieht einen roten Ball im Garten."),
    ),
    # plural subject and verb, accusative masculine definite
    (
        _pair([NounPhrase("dog", plural=True)], "see", NounPhrase("ball")),
        ("The dogs see the ball.", "Die Hunde sehen den Ball."),
    ),
    # number with strong plural adjective, "an" before a vowel
    (
        _pair([NounPhrase("dog", "two", "small")], "eat", NounPhrase("apple", A)),
        ("Two small dogs eat an apple.", "Zwei kleine Hunde essen einen Apfel."),
    ),
    # neuter accusative mixed, feminine dative
    (
        _pair([NounPhrase("woman")], "read", NounPhrase("book", A, "old"), "on", NounPhrase("street")),
        ("The woman reads an old book on the street.", "Die Frau liest ein altes Buch auf der Straße."),
    ),
    # masculine nominative mixed, dative plural noun with -n
    (
        _pair([NounPhrase("man", A, "young")], "hold", NounPhrase("cat"), "with", NounPhrase("dog", plural=True)),
        ("A young man holds the cat with the dogs.", "Ein junger Mann hält die Katze mit den Hunden."),
    ),
    # feminine accusative mixed, für + accusative
    (
        _pair([NounPhrase("child")], "buy", NounPhrase("flower", A, "beautiful"), "for", NounPhrase("man")),
        ("The child buys a beautiful flower for the man.", "Das Kind kauft eine schöne Blume für den Mann."),
    ),
    # coordinated subjects take the plural verb; an dem -> am
    (
        _pair([NounPhrase("man"), NounPhrase("woman")], "visit", NounPhrase("teacher"), "at", NounPhrase("window")),
        (
            "The man and the woman visit the teacher at the window.",
            "Der Mann und die Frau besuchen den Lehrer am Fenster.",
        ),
    ),
    # neuter nominative indefinite, ohne + accusative masculine indefinite
    (
        _pair([NounPhrase("girl", A)], "carry", NounPhrase("bag", THE, "old"), "without", NounPhrase("dog", A)),
        ("A girl carries the old bag without a dog.", "Ein Mädchen trägt die alte Tasche ohne einen Hund."),
    ),
    # unter does not contract; masculine dative weak
    (
        _pair([NounPhrase("cat")], "catch", NounPhrase("mouse", "three"), "under", NounPhrase("table", THE, "big")),
        ("The cat catches three mice under the big table.", "Die Katze fängt drei Mäuse unter dem großen Tisch."),
    ),
    # strong dative plural adjective and noun
    (
        _pair([NounPhrase("teacher")], "find", NounPhrase("letter", A), "with", NounPhrase("horse", "three", "hungry")),
        (
            "The teacher finds a letter with three hungry horses.",
            "Der Lehrer findet einen Brief mit drei hungrigen Pferden.",
        ),
    ),
    # neuter accusative weak, neuter dative mixed
    (
        _pair(
            [NounPhrase("doctor")],
            "wash",
            NounPhrase("horse", THE, "white"),
            "next to",
            NounPhrase("house", A, "small"),
        ),
        (
            "The doctor washes the white horse next to a small house.",
            "Der Arzt wäscht das weiße Pferd neben einem kleinen Haus.",
        ),
    ),
    # neuter nominative mixed, plural accusative weak, "in einem" does not contract
    (
        _pair(
            [NounPhrase("horse", A, "big")],
            "like",
            NounPhrase("flower", THE, "green", plural=True),
            "in",
            NounPhrase("garden", A),
        ),
        ("A big horse likes the green flowers in a garden.", "Ein großes Pferd mag die grünen Blumen in einem Garten."),
    ),
    # plural nominative weak, feminine dative definite after "in"
    (
        _pair(
            [NounPhrase("girl", THE, "young", plural=True)],
            "have",
            NounPhrase("hat", A, "red"),
            "in",
            NounPhrase("kitchen"),
        ),
        ("The young girls have a red hat in the kitchen.", "Die jungen Mädchen haben einen roten Hut in der Küche."),
    ),
    # contraction also before an adjective; plural that already ends in -n stays unchanged in the dative
    (
        _pair([NounPhrase("doctor", "two")], "see", NounPhrase("cake"), "in", NounPhrase("garden", THE, "big")),
        ("Two doctors see the cake in the big garden.", "Zwei Ärzte sehen den Kuchen im großen Garten."),
    ),
    (
        _pair(
            [NounPhrase("bird")], "bring", NounPhrase("apple", "two", "red"), "for", NounPhrase("woman", plural=True)
        ),
        ("The bird brings two red apples for the women.", "Der Vogel bringt zwei rote Äpfel für die Frauen."),
    ),
]


@pytest.mark.parametrize(("rendered", "expected"), HAND_WRITTEN_TRANSLATIONS)
def test_hand_written_translations(rendered, expected):
    assert rendered == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda: NounPhrase("unicorn"),
        lambda: NounPhrase("dog", "some"),
        lambda: NounPhrase("dog", adjective="purple"),
        lambda: NounPhrase("dog", A, plural=True),
        lambda: Sentence((), "see", NounPhrase("ball")),
        lambda: Sentence((NounPhrase("dog"),), "fly", NounPhrase("ball")),
        lambda: Sentence((NounPhrase("dog"),), "see", NounPhrase("ball"), "in"),
        lambda: Sentence((NounPhrase("dog"),), "see", NounPhrase("ball"), "over", NounPhrase("table")),
    ],
)
def test_invalid_structures_are_rejected(make):
    with pytest.raises(ValueError):
        make()
