"""Answer normalisation, token F1, number parsing and abstention detection shared by the rule judges."""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from functools import lru_cache

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—…«»"})
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}\b)")
_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13", "fourteen": "14",
    "fifteen": "15", "sixteen": "16", "seventeen": "17", "eighteen": "18", "nineteen": "19", "twenty": "20",
}


def fold(text: str) -> str:
    """Unicode-fold: compatibility forms, accents dropped (Zürich == Zurich), curly quotes made straight."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')


@lru_cache(maxsize=1 << 16)  # pure, and the judges normalise the same texts many times
def normalize(text: str) -> str:
    """SQuAD-style plus: accents folded, lower case, digit-group commas dropped (1,000 == 1000), punctuation to
    spaces, articles dropped, small number words as digits (three == 3), whitespace collapsed."""
    text = _DIGIT_COMMA.sub("", fold(text).lower())
    text = text.replace("'", "")  # don't -> dont, so contractions stay one token
    text = _ARTICLES.sub(" ", text.translate(_PUNCT))
    return " ".join(_NUMBER_WORDS.get(tok, tok) for tok in text.split())


# Negated contractions (apostrophes already removed by `normalize`) split into verb + "not", so "can't",
# "cannot" and "can not" are the same tokens and a negation always shows as the token "not".
_CONTRACTIONS = {
    "cant": ("can", "not"), "cannot": ("can", "not"), "dont": ("do", "not"), "doesnt": ("does", "not"),
    "didnt": ("did", "not"), "isnt": ("is", "not"), "arent": ("are", "not"), "wasnt": ("was", "not"),
    "werent": ("were", "not"), "wont": ("will", "not"), "wouldnt": ("would", "not"), "couldnt": ("could", "not"),
    "shouldnt": ("should", "not"), "hasnt": ("has", "not"), "havent": ("have", "not"), "hadnt": ("had", "not"),
    "mustnt": ("must", "not"), "neednt": ("need", "not"), "aint": ("is", "not"), "mightnt": ("might", "not"),
}
NEGATORS = frozenset({"not", "no", "never", "neither", "nor", "none", "nothing", "nobody", "nowhere", "false",
                      "untrue", "myth", "misconception"})


def tokens(text: str) -> list[str]:
    """Normalised tokens with negated contractions split ("can't" -> "can", "not")."""
    return list(_tokens(text))


@lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> tuple[str, ...]:  # the judges tokenise the same answers and references many times
    out: list[str] = []
    for tok in normalize(text).split():
        out += _CONTRACTIONS.get(tok, (tok,))
    return tuple(out)


def negated(text: str) -> bool:
    """Whether a statement is negative: it holds a negation word ("not", "no", "never", "can't", "it's a myth
    that ..."). Coarse on purpose: used only to refuse a match between statements of opposite polarity."""
    return any(tok in NEGATORS for tok in tokens(text))


def token_f1(prediction: str, reference: str, ignore: frozenset[str] | set[str] = frozenset()) -> float:
    """SQuAD token F1. `ignore`: tokens that carry no evidence (the question's own words, which answers and
    sentence-long references both repeat); dropped from both sides unless that empties the reference."""
    pred, ref = tokens(prediction), tokens(reference)
    if ignore:
        kept = [t for t in ref if t not in ignore]
        if kept:
            pred, ref = [t for t in pred if t not in ignore], kept
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def find_phrase(text: str, phrase: str) -> int:
    """Token index where the normalised phrase starts in the normalised text, or -1."""
    hay, needle = tokens(text), tokens(phrase)
    if not needle:
        return -1
    n = len(needle)
    return next((i for i in range(len(hay) - n + 1) if hay[i : i + n] == needle), -1)


def contains_phrase(text: str, phrase: str) -> bool:
    """Whether the normalised phrase occurs in the normalised text as whole tokens."""
    return find_phrase(text, phrase) >= 0


# --- abstention ---------------------------------------------------------------------------------------------
# Matched on the normalised answer (lower case, apostrophes removed: "don't" -> "dont", "I'm" -> "im"; articles
# are gone, so patterns never contain a/an/the).
# A *refusal* says the model will not or cannot answer; a *hedge* only expresses doubt and is usually followed by
# an answer ("I'm not sure, but I think it is Paris"), so a hedge alone makes an abstention only when nothing
# else is said.
_REFUSAL = re.compile(
    r"\b("
    r"i (do not|dont) (know|have ((that|this|any|enough|sufficient|reliable|specific|real time) )?(answer|"
    r"information|knowledge|data|details|context|records?))"
    r"|(nobody|no one) (knows|can say)|(im|i am) not sure (how to|what to (say|answer|tell))"
    r"|i (do not|dont) know (how to|what to (say|answer|tell))"
    r"|i (cannot|cant|can not|am unable to|m unable to|am not able to|m not able to|could not|couldnt) "
    r"(answer|say|tell|determine|provide|find|confirm|know|verify|identify|give|access|help|assist)"
    r"|(impossible|not possible) to (say|tell|know|determine|answer)"
    r"|(unable|not able) to (answer|determine|find|provide|say|tell|identify|verify|confirm)"
    r"|no (way|means) to (know|tell|determine)"
    r"|(do not|dont|does not|doesnt) have (enough|sufficient|access|any information|information|the information"
    r"|real time|data)"
    r"|(not|isnt|is not) (enough|sufficient) (information|context|data|evidence)"
    r"|insufficient (information|context|data|evidence)"
    r"|(context|passage|text|document|article|information|knowledge|question|story|paragraph)s? "
    r"(provided |given |above )?(does not|doesnt|do not|dont|did not|didnt|fails to|does) "
    r"(not )?(mention|say|provide|contain|specify|state|include|give|answer|indicate|tell)"
    r"|(there is|theres|there are) no (information|mention|data|answer|record|evidence)"
    r"|(context|passage|text|document|article|story|paragraph)s? (gives|has|offers|provides|contains|includes|holds"
    r"|states|mentions) no\b"
    r"|no (information|mention) (about|on|of|regarding|is given|is provided)"
    r"|not (mentioned|specified|provided|stated|given|included|available) in"
    r"|(cannot|cant|can not) be (determined|answered|known|found|inferred)"
    r"|(is|remains) (unknown|unanswerable|not known)|answer is unknown|^unknown$|^unanswerable$"
    r"|(question|this) is unanswerable"
    r"|i have no (idea|comment|information|knowledge|way)|^no comment"
    r"|i (would|d) rather not (answer|say|speculate)|i (wont|will not) (answer|speculate|guess)"
    r"|(beyond|outside) (my|the scope of my) knowledge|my knowledge (cutoff|does not|doesnt)"
    r"|as (an )?ai( language model| assistant)? i (cannot|cant|do not|dont|am not able|am unable)"
    r"|i (cannot|cant|do not|dont) (browse|have access)"
    r")\b"
)
_HEDGE = re.compile(
    r"\b(i m not (sure|certain)|im not (sure|certain)|i am not (sure|certain)|not (entirely |completely |100 )?"
    r"(sure|certain)|i (cant|cannot) be (sure|certain)|i (m|am) unsure|unsure|i think|i believe|probably|"
    r"possibly|maybe|perhaps|it (might|may|could) be|if i (recall|remember) correctly)\b"
)
_FILLER = {
    "i", "im", "am", "not", "sure", "certain", "but", "so", "sorry", "unfortunately", "however", "well", "hmm",
    "about", "this", "that", "it", "answer", "to", "question", "entirely", "completely", "100", "unsure", "of",
    "is", "be", "can", "cant", "cannot", "very", "really", "honestly", "exactly", "either",
}


def is_refusal(text: str) -> bool:
    """The answer says it does not or cannot answer (I don't know / the context doesn't say / no comment)."""
    return bool(_REFUSAL.search(normalize(text)))


def is_abstention(text: str) -> bool:
    """A refusal, or a hedge with nothing else said ("I'm not sure." / "Hmm, not certain, sorry")."""
    if is_refusal(text):
        return True
    norm = normalize(text)
    if not _HEDGE.search(norm):
        return False
    rest = [tok for tok in _HEDGE.sub(" ", norm).split() if tok not in _FILLER]
    return not rest


# --- numbers ------------------------------------------------------------------------------------------------
_NUM = r"[-−+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER = re.compile(rf"(?<![\w.]){_NUM}(?:\s*/\s*\d+(?:\.\d+)?)?")
_FRAC = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]+?)\s*\}\s*\{\s*([^{}]+?)\s*\}")
_LATEX_NOISE = re.compile(r"\\(?:left|right|,|;|!|quad|qquad|text\s*\{[^{}]*\}|mathrm\s*\{[^{}]*\}|%|\$)")


def clean_numbers(text: str) -> str:
    """Make numbers in free text parseable: 1,234 -> 1234, \\frac{a}{b} -> a/b, unicode minus, currency gone."""
    text = fold(text).replace("−", "-")
    text = _DIGIT_COMMA.sub("", text)
    text = re.sub(r"(?<=\d) (?=\d{3}\b)", "", text)  # thin/normal-space digit groups: 12 000
    text = _FRAC.sub(lambda m: f"{m.group(1)}/{m.group(2)}", text)
    text = _LATEX_NOISE.sub(" ", text)
    return text.replace("$", " ").replace("€", " ").replace("£", " ")


def parse_number(text: str) -> float | None:
    """The value of one number string ("1,234.5", "-3/4", "50%", "$12", "1e-3", "\\frac{1}{2}"), or None."""
    cleaned = clean_numbers(text).strip().rstrip(".")
    match = _NUMBER.search(cleaned)
    if match is None:
        return None
    return _value(match.group(0))


def as_number(text: str) -> float | None:
    """The value of a string that is one number and nothing else (a reference like "1,234", "-0.5", "3/4",
    "50%"), or None ("[1, 2]", "x = 3", "True")."""
    cleaned = clean_numbers(text).strip().rstrip(".").rstrip("%").strip()
    if not re.fullmatch(_NUMBER.pattern, cleaned):
        return None
    return _value(cleaned)


def _value(token: str) -> float | None:
    token = token.replace(" ", "").replace("−", "-")
    try:
        if "/" in token:
            num, den = token.split("/", 1)
            return float(num) / float(den) if float(den) != 0 else None
        return float(token)
    except ValueError:
        return None


def numbers_in(text: str) -> list[float]:
    """Every number in the text, in order, after `clean_numbers`."""
    out = []
    for match in _NUMBER.finditer(clean_numbers(text)):
        value = _value(match.group(0))
        if value is not None:
            out.append(value)
    return out
