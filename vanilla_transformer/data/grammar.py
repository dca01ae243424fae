"""A deterministic English→German parallel corpus from a small bilingual grammar ("The small dog sees a red ball in
the garden." → "Der kleine Hund sieht einen roten Ball im Garten."): the German is grammatical and keeps the English
word order, so a small model learns it in minutes, and `grammar_pairs(n, seed)` is the same on every machine and
Python version."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..errors import DataError

NOMINATIVE, ACCUSATIVE, DATIVE = "nominative", "accusative", "dative"
PERSON, ANIMAL, THING, TEXT, FOOD, PLACE, FURNITURE = "person", "animal", "thing", "text", "food", "place", "furniture"
ANIMATE = (PERSON, ANIMAL)
INANIMATE = (THING, TEXT, FOOD, PLACE, FURNITURE)

# The grammar holds about 3.4e12 distinct sentences; duplicates are rejected by sampling again, which is fast only
# far below that, so requests are capped well above what a training run needs.
MAX_PAIRS = 1_000_000
ATTEMPTS_PER_PAIR = 20


@dataclass(frozen=True)
class Noun:
    """A noun in both languages; German plurals are listed because they are irregular (Hund/Hunde, Buch/Bücher)."""

    english: str
    english_plural: str
    gender: str  # "m", "f" or "n"
    german: str
    german_plural: str
    kind: str  # what the noun denotes, so that verbs, adjectives and prepositions pick sensible nouns


@dataclass(frozen=True)
class Verb:
    """A transitive verb in the third person singular and plural, with the kinds of noun it takes."""

    english_singular: str
    german_singular: str
    german_plural: str
    subject_kinds: tuple[str, ...]
    object_kinds: tuple[str, ...]


@dataclass(frozen=True)
class Preposition:
    german: str
    case: str
    nouns: tuple[str, ...]  # English nouns the preposition is used with, so that "under the kitchen" never occurs


# English nouns have distinct singular and plural forms (no "fish", "sheep"), so every English sentence has
# exactly one German translation.
NOUNS = {
    noun.english: noun
    for noun in (
        Noun("man", "men", "m", "Mann", "Männer", PERSON),
        Noun("woman", "women", "f", "Frau", "Frauen", PERSON),
        Noun("child", "children", "n", "Kind", "Kinder", PERSON),
        Noun("girl", "girls", "n", "Mädchen", "Mädchen", PERSON),
        Noun("teacher", "teachers", "m", "Lehrer", "Lehrer", PERSON),
        Noun("doctor", "doctors", "m", "Arzt", "Ärzte", PERSON),
        Noun("dog", "dogs", "m", "Hund", "Hunde", ANIMAL),
        Noun("cat", "cats", "f", "Katze", "Katzen", ANIMAL),
        Noun("horse", "horses", "n", "Pferd", "Pferde", ANIMAL),
        Noun("bird", "birds", "m", "Vogel", "Vögel", ANIMAL),
        Noun("mouse", "mice", "f", "Maus", "Mäuse", ANIMAL),
        Noun("ball", "balls", "m", "Ball", "Bälle", THING),
        Noun("bag", "bags", "f", "Tasche", "Taschen", THING),
        Noun("hat", "hats", "m", "Hut", "Hüte", THING),
        Noun("flower", "flowers", "f", "Blume", "Blumen", THING),
        Noun("picture", "pictures", "n", "Bild", "Bilder", THING),
        Noun("book", "books", "n", "Buch", "Bücher", TEXT),
        Noun("letter", "letters", "m", "Brief", "Briefe", TEXT),
        Noun("newspaper", "newspapers", "f", "Zeitung", "Zeitungen", TEXT),
        Noun("apple", "apples", "m", "Apfel", "Äpfel", FOOD),
        Noun("cake", "cakes", "m", "Kuchen", "Kuchen", FOOD),
        Noun("garden", "gardens", "m", "Garten", "Gärten", PLACE),
        Noun("house", "houses", "n", "Haus", "Häuser", PLACE),
        Noun("street", "streets", "f", "Straße", "Straßen", PLACE),
        Noun("park", "parks", "m", "Park", "Parks", PLACE),
        Noun("school", "schools", "f", "Schule", "Schulen", PLACE),
        Noun("kitchen", "kitchens", "f", "Küche", "Küchen", PLACE),
        Noun("table", "tables", "m", "Tisch", "Tische", FURNITURE),
        Noun("chair", "chairs", "m", "Stuhl", "Stühle", FURNITURE),
        Noun("bed", "beds", "n", "Bett", "Betten", FURNITURE),
        Noun("tree", "trees", "m", "Baum", "Bäume", FURNITURE),
        Noun("window", "windows", "n", "Fenster", "Fenster", FURNITURE),
        Noun("door", "doors", "f", "Tür", "Türen", FURNITURE),
    )
}

# English adjective: (German stem, kinds of noun it describes). Every stem takes regular endings (klein-e, klein-en).
ADJECTIVES = {
    "small": ("klein", ANIMATE + INANIMATE),
    "big": ("groß", ANIMATE + INANIMATE),
    "old": ("alt", ANIMATE + INANIMATE),
    "beautiful": ("schön", ANIMATE + INANIMATE),
    "young": ("jung", ANIMATE),
    "hungry": ("hungrig", ANIMATE),
    "happy": ("glücklich", ANIMATE),
    "new": ("neu", INANIMATE),
    "red": ("rot", INANIMATE),
    "green": ("grün", INANIMATE),
    "black": ("schwarz", (ANIMAL, *INANIMATE)),
    "white": ("weiß", (ANIMAL, *INANIMATE)),
}

# Keyed by the English base form, which is the plural. Several German verbs change their stem in the singular
# (sieht/sehen, isst/essen).
VERBS = {
    "see": Verb("sees", "sieht", "sehen", ANIMATE, ANIMATE + INANIMATE),
    "like": Verb("likes", "mag", "mögen", ANIMATE, ANIMATE + INANIMATE),
    "find": Verb("finds", "findet", "finden", ANIMATE, (PERSON, ANIMAL, THING, TEXT, FOOD)),
    "have": Verb("has", "hat", "haben", ANIMATE, (ANIMAL, THING, TEXT, FOOD)),
    "eat": Verb("eats", "isst", "essen", ANIMATE, (FOOD,)),
    "catch": Verb("catches", "fängt", "fangen", ANIMATE, (ANIMAL, THING)),
    "bring": Verb("brings", "bringt", "bringen", ANIMATE, (THING, TEXT, FOOD)),
    "carry": Verb("carries", "trägt", "tragen", (PERSON,), (ANIMAL, THING, TEXT, FOOD)),
    "hold": Verb("holds", "hält", "halten", (PERSON,), (ANIMAL, THING, TEXT, FOOD)),
    "read": Verb("reads", "liest", "lesen", (PERSON,), (TEXT,)),
    "buy": Verb("buys", "kauft", "kaufen", (PERSON,), (ANIMAL, THING, TEXT, FOOD, FURNITURE)),
    "wash": Verb("washes", "wäscht", "waschen", (PERSON,), (PERSON, ANIMAL, THING, FURNITURE)),
    "visit": Verb("visits", "besucht", "besuchen", (PERSON,), (PERSON, PLACE)),
}

_ANIMATE_NOUNS = tuple(name for name, noun in NOUNS.items() if noun.kind in ANIMATE)
PREPOSITIONS = {
    "in": Preposition("in", DATIVE, ("garden", "house", "park", "school", "kitchen")),
    "on": Preposition("auf", DATIVE, ("table", "chair", "bed", "tree", "street")),
    "under": Preposition("unter", DATIVE, ("table", "chair", "bed", "tree")),
    "next to": Preposition("neben", DATIVE, ("table", "bed", "tree", "house", "school", "window", "door")),
    "at": Preposition("an", DATIVE, ("table", "window", "door")),
    "with": Preposition("mit", DATIVE, _ANIMATE_NOUNS),
    "for": Preposition("für", ACCUSATIVE, _ANIMATE_NOUNS),
    "without": Preposition("ohne", ACCUSATIVE, _ANIMATE_NOUNS),
}
CONTRACTIONS = {("in", "dem"): "im", ("an", "dem"): "am"}

NUMBER_WORDS = {"two": "zwei", "three": "drei"}
DETERMINERS = ("the", "a", *NUMBER_WORDS)


def _by_slot(masculine: str, feminine: str, neuter: str, plural: str) -> dict[str, str]:
    return {"m": masculine, "f": feminine, "n": neuter, "pl": plural}


DEFINITE_ARTICLES = {
    NOMINATIVE: _by_slot("der", "die", "das", "die"),
    ACCUSATIVE: _by_slot("den", "die", "das", "die"),
    DATIVE: _by_slot("dem", "der", "dem", "den"),
}
INDEFINITE_ARTICLES = {  # singular only: "a" has no plural
    NOMINATIVE: _by_slot("ein", "eine", "ein", ""),
    ACCUSATIVE: _by_slot("einen", "eine", "ein", ""),
    DATIVE: _by_slot("einem", "einer", "einem", ""),
}
# Adjective endings: weak after der/die/das, mixed after ein/eine, strong when no article shows the case
# (here only plurals after a number: "zwei kleine Hunde", "mit zwei kleinen Hunden").
WEAK_ENDINGS = {
    NOMINATIVE: _by_slot("e", "e", "e", "en"),
    ACCUSATIVE: _by_slot("en", "e", "e", "en"),
    DATIVE: _by_slot("en", "en", "en", "en"),
}
MIXED_ENDINGS = {
    NOMINATIVE: _by_slot("er", "e", "es", ""),
    ACCUSATIVE: _by_slot("en", "e", "es", ""),
    DATIVE: _by_slot("en", "en", "en", ""),
}
STRONG_PLURAL_ENDINGS = {NOMINATIVE: "e", ACCUSATIVE: "e", DATIVE: "en"}


@dataclass(frozen=True)
class NounPhrase:
    """Determiner, optional adjective and noun, named by their English words: `NounPhrase("dog", "a", "small")`.
    `plural` selects "the dogs" over "the dog"; "two" and "three" are always plural and "a" never is."""

    noun: str
    determiner: str = "the"
    adjective: str | None = None
    plural: bool = False

    def __post_init__(self) -> None:
        if self.noun not in NOUNS:
            raise DataError(f"Unknown noun {self.noun!r}")
        if self.determiner not in DETERMINERS:
            raise DataError(f"Unknown determiner {self.determiner!r}, expected one of {DETERMINERS}")
        if self.adjective is not None and self.adjective not in ADJECTIVES:
            raise DataError(f"Unknown adjective {self.adjective!r}")
        if self.determiner == "a" and self.plural:
            raise DataError('"a" cannot start a plural noun phrase')

    @property
    def is_plural(self) -> bool:
        return self.plural or self.determiner in NUMBER_WORDS


@dataclass(frozen=True)
class Sentence:
    """One clause of the grammar: one or two subjects (joined by "and"), a verb, a direct object and optionally a
    prepositional phrase. `verb` and `preposition` are keys of `VERBS` and `PREPOSITIONS`."""

    subjects: tuple[NounPhrase, ...]
    verb: str
    direct_object: NounPhrase
    preposition: str | None = None
    prepositional_object: NounPhrase | None = None

    def __post_init__(self) -> None:
        if len(self.subjects) not in (1, 2):
            raise DataError(f"A sentence has one or two subjects, got {len(self.subjects)}")
        if self.verb not in VERBS:
            raise DataError(f"Unknown verb {self.verb!r}")
        if (self.preposition is None) != (self.prepositional_object is None):
            raise DataError("Give both a preposition and its object, or neither")
        if self.preposition is not None and self.preposition not in PREPOSITIONS:
            raise DataError(f"Unknown preposition {self.preposition!r}")


def _english_noun_phrase(phrase: NounPhrase) -> list[str]:
    noun = NOUNS[phrase.noun]
    words = [phrase.determiner]
    if phrase.adjective is not None:
        words.append(phrase.adjective)
    words.append(noun.english_plural if phrase.is_plural else noun.english)
    if phrase.determiner == "a" and words[1][0] in "aeiou":
        words[0] = "an"
    return words


def _german_noun_phrase(phrase: NounPhrase, case: str) -> list[str]:
    noun = NOUNS[phrase.noun]
    slot = "pl" if phrase.is_plural else noun.gender
    if phrase.determiner == "the":
        words, ending = [DEFINITE_ARTICLES[case][slot]], WEAK_ENDINGS[case][slot]
    elif phrase.determiner == "a":
        words, ending = [INDEFINITE_ARTICLES[case][slot]], MIXED_ENDINGS[case][slot]
    else:
        words, ending = [NUMBER_WORDS[phrase.determiner]], STRONG_PLURAL_ENDINGS[case]
    if phrase.adjective is not None:
        words.append(ADJECTIVES[phrase.adjective][0] + ending)
    if not phrase.is_plural:
        words.append(noun.german)
    elif case == DATIVE and not noun.german_plural.endswith(("n", "s")):
        words.append(noun.german_plural + "n")  # den Hunden, but den Frauen, den Parks
    else:
        words.append(noun.german_plural)
    return words


def _as_sentence(words: list[str]) -> str:
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def render(sentence: Sentence) -> tuple[str, str]:
    """The (English, German) pair for `sentence`, each capitalized and ending in "."."""
    english: list[str] = []
    german: list[str] = []
    for index, subject in enumerate(sentence.subjects):
        if index:
            english.append("and")
            german.append("und")
        english += _english_noun_phrase(subject)
        german += _german_noun_phrase(subject, NOMINATIVE)
    verb = VERBS[sentence.verb]
    plural_subject = len(sentence.subjects) > 1 or sentence.subjects[0].is_plural
    english.append(sentence.verb if plural_subject else verb.english_singular)
    german.append(verb.german_plural if plural_subject else verb.german_singular)
    english += _english_noun_phrase(sentence.direct_object)
    german += _german_noun_phrase(sentence.direct_object, ACCUSATIVE)
    if sentence.preposition is not None and sentence.prepositional_object is not None:
        preposition = PREPOSITIONS[sentence.preposition]
        phrase = _german_noun_phrase(sentence.prepositional_object, preposition.case)
        contraction = CONTRACTIONS.get((preposition.german, phrase[0]))
        english += [sentence.preposition, *_english_noun_phrase(sentence.prepositional_object)]
        german += [contraction, *phrase[1:]] if contraction else [preposition.german, *phrase]
    return _as_sentence(english), _as_sentence(german)


# Sampling uses only `Random.random()`, the one method whose output Python guarantees across versions.
def _pick(rng: random.Random, options: tuple | list):
    return options[int(rng.random() * len(options))]


COORDINATION_RATE = 0.15  # share of sentences with two subjects
ADJECTIVE_RATE = 0.4  # share of noun phrases with an adjective
PREPOSITION_RATE = 0.6  # share of sentences with a prepositional phrase
# (determiner, plural), repeated to weight singulars ahead of each plural variant.
_DETERMINER_CHOICES = (("the", False),) * 2 + (("a", False),) * 2 + (("the", True), ("two", True), ("three", True))


def _nouns_of_kinds(kinds: tuple[str, ...], excluded: list[str]) -> list[str]:
    return [name for name, noun in NOUNS.items() if noun.kind in kinds and name not in excluded]


def _sample_noun_phrase(rng: random.Random, nouns: list[str] | tuple[str, ...]) -> NounPhrase:
    noun = _pick(rng, nouns)
    determiner, plural = _pick(rng, _DETERMINER_CHOICES)
    adjective = None
    if rng.random() < ADJECTIVE_RATE:
        adjective = _pick(rng, [name for name, (_, kinds) in ADJECTIVES.items() if NOUNS[noun].kind in kinds])
    return NounPhrase(noun, determiner, adjective, plural)


def _sample_sentence(rng: random.Random) -> Sentence:
    verb = _pick(rng, tuple(VERBS))
    # No noun occurs twice in one sentence ("the dog sees the dog"), which reads as a mistake.
    used: list[str] = []
    subjects = []
    for _ in range(2 if rng.random() < COORDINATION_RATE else 1):
        subjects.append(_sample_noun_phrase(rng, _nouns_of_kinds(VERBS[verb].subject_kinds, used)))
        used.append(subjects[-1].noun)
    direct_object = _sample_noun_phrase(rng, _nouns_of_kinds(VERBS[verb].object_kinds, used))
    used.append(direct_object.noun)
    if rng.random() >= PREPOSITION_RATE:
        return Sentence(tuple(subjects), verb, direct_object)
    preposition = _pick(rng, tuple(PREPOSITIONS))
    # Never empty: subjects are animate, so a place preposition loses at most the object's noun (each has three or
    # more), and with/for/without lose at most three of their eleven animate nouns.
    nouns = [noun for noun in PREPOSITIONS[preposition].nouns if noun not in used]
    return Sentence(tuple(subjects), verb, direct_object, preposition, _sample_noun_phrase(rng, nouns))


def grammar_pairs(num_pairs: int, seed: int = 0) -> list[tuple[str, str]]:
    """`num_pairs` (English, German) sentence pairs with distinct English sides, the same for the same arguments;
    at most `MAX_PAIRS`."""
    if not 0 <= num_pairs <= MAX_PAIRS:
        raise DataError(f"Cannot generate {num_pairs} grammar pairs: the number must be between 0 and {MAX_PAIRS}")
    rng = random.Random(seed)
    pairs: dict[str, str] = {}  # English → German, in the order drawn
    max_attempts = ATTEMPTS_PER_PAIR * num_pairs
    for _ in range(max_attempts):
        if len(pairs) == num_pairs:
            break
        pairs.setdefault(*render(_sample_sentence(rng)))
    if len(pairs) < num_pairs:
        raise DataError(
            f"Found only {len(pairs)} distinct grammar pairs in {max_attempts} attempts, {num_pairs} were asked for "
            f"(the maximum is {MAX_PAIRS})"
        )
    return list(pairs.items())
