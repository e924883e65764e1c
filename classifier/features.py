"""The classifier's cheap signals: deterministic, regex-only text features (well under a millisecond per prompt).

The design lists them: length in words, reasoning keywords, entity count, question depth and domain
specificity. The heuristic router scores complexity from them (`classifier.heuristic`), and the learned
classifier will append `feature_vector(...)` to its encoder's embedding, so every count here is defined once and
tested once. Everything is an approximation that errs on the side of being cheap and predictable:

- words: `\\w+` runs (apostrophes join: "don't" is one word); fenced and inline code count too.
- sentences: prose (code removed) split at . ! ? followed by a space or the end, CJK full stops, and line
  breaks; pieces without a word character do not count.
- reasoning keywords (`REASONING_PATTERNS`): the design's list plus inflections and near-synonyms, matched
  case-insensitively on word boundaries in prose: "reanalyzed" counts (re-analysis is analysis), "incomparable"
  and "comparable" do not.
- entities (`find_entities`): distinct strings of four kinds: capitalised word runs in prose, less the first
  word of a run that starts a sentence or line ("Yesterday Alice met Bob in New York" → Alice, Bob, New York);
  acronyms and model numbers in prose (API, GPT4, H100; a run of three or more all-caps words is shouting, not
  acronyms); numbers with units or currency (5 GB, 3.2 ms, 40%, $12); code identifiers (func(), dotted.names,
  snake_case, camelCase, PascalCase with two humps). Distinct, so a name repeated ten times counts once.
- question depth: question-mark runs + enumerated items (lines starting "1." "a)" "-" "*", inline "(2)") +
  multi-part connectors ("and then", "also", "additionally", "as well as", ...).
- domain terms: words from five small lexicons (`LEXICONS`: code, math, science/medicine, law, finance; a
  plural s/es/ies is stripped) + LaTeX commands, math symbols and equations in prose. `domain_specificity` is
  the technical share of the text: (lexicon words in prose + every word of code + math symbols) / words,
  capped at 1. `domain` is the lexicon with the most hits (code also counts words of code, math also counts
  math symbols), "general" when the best one has fewer than max(1, 5% of the words).
- has_code: a fenced block or `inline code`, or a code-looking line or token in prose (def/class/import lines,
  lines ending in ; or {, ==, &&, =>, ::, func(), HTML tags).

Inputs longer than `MAX_CHARS` are cut there first, so one pasted book cannot stall the router.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

MAX_CHARS = 16_000  # ~4k tokens: longer prompts score far above the top threshold anyway
DOMAINS: tuple[str, ...] = ("code", "math", "science", "law", "finance")
GENERAL = "general"


@dataclass(frozen=True)
class TextFeatures:
    num_words: int
    num_sentences: int
    num_reasoning_keywords: int
    num_entities: int
    question_depth: int
    num_domain_terms: int  # lexicon words + math symbols: a count, so it never falls when text is added
    domain_specificity: float  # 0..1: the technical share of the words
    has_code: bool
    domain: str  # one of DOMAINS or GENERAL


# ---------------------------------------------------------------------------------------------- patterns

REASONING_PATTERNS: tuple[str, ...] = (
    r"(?:re-?)?analy(?:[sz]e[sd]?|[sz]ing|s[ie]s|tic(?:al(?:ly)?)?)",
    r"compar(?:e[sd]?|ing|isons?|ative(?:ly)?)",
    r"contrast(?:s|ed|ing)?",
    r"explain(?:s|ed|ing)?\s+(?:why|how)",
    r"step[\s-]+by[\s-]+step",
    r"(?:re-?)?evaluat(?:e[sd]?|ing|ions?)",
    r"synthesi[sz](?:e[sd]?|ing)|synthes[ie]s",
    r"what\s+(?:would|will|could|might)\s+happen\s+if|what\s+happens\s+if",
    r"trade[\s-]?offs?",
    r"pros\s+and\s+cons",
    r"prov(?:e[sdn]?|ing)|proofs?",
    r"deriv(?:e[sd]?|ing|ations?)",
    r"justif(?:y|ies|ied|ying|ications?)",
    r"implications?",
    r"assess(?:es|ed|ing|ments?)?",
    r"critiqu(?:e[sd]?|ing)|critically",
    r"reason(?:ing)?\s+(?:about|through)",
    r"in[\s-]depth",
    r"walk\s+(?:me|us)\s+through",
    r"root\s+causes?",
)
_REASONING = re.compile(r"\b(?:" + "|".join(REASONING_PATTERNS) + r")\b", re.IGNORECASE)
_CONNECTORS = re.compile(r"\b(?:and\s+then|also|additionally|as\s+well\s+as|in\s+addition|furthermore|moreover|"
                         r"after\s+that|besides|finally)\b", re.IGNORECASE)

_WORD = re.compile(r"\w+(?:['’]\w+)*")
_FENCED = re.compile(r"(```|~~~).*?(?:\1|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|[。！？]+|\n")
_QUESTION = re.compile(r"[?？]+")
_ENUM_LINE = re.compile(r"^[ \t]*(?:\d{1,2}[.)]|[A-Za-z][.)]|[-*•+])[ \t]+\S", re.MULTILINE)
_ENUM_INLINE = re.compile(r"(?:^|(?<=\s))\((?:\d{1,2}|[a-z]|[ivx]{1,4})\)")
_ENUM_MARKER = re.compile(r"^[ \t]*(?:\d{1,2}|[A-Za-z]|[ivxIVX]{1,4})[.)][ \t]+", re.MULTILINE)

_CAPITALIZED_RUN = re.compile(r"\b[A-Z][a-z]+(?:[ \t]+[A-Z][a-z]+)*\b")
_SENTENCE_START_CHARS = frozenset(".!?:;\n。！？")
_SKIP_BEFORE_WORD = frozenset(" \t\"'“‘«([*_#>-")
_SHOUTING = re.compile(r"\b[A-Z]{2,}\b(?:[ \t]+[A-Z]{2,}\b){2,}")
_ACRONYM = re.compile(r"\b(?:[A-Z]{2,}[0-9]*s?|[A-Z]+[0-9]+[A-Za-z0-9]*)\b")
_UNIT_ACRONYMS = frozenset({"KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "USD", "EUR", "GBP", "JPY"})
_UNITS = (r"%|‰|°[CF]?|[kKMGT]i?B|bytes?|bits?|[kMG]?Hz|ms|ns|µs|us|sec|secs|seconds?|mins?|minutes?|hrs?|hours?|"
          r"days?|weeks?|months?|years?|mg|kg|g|lbs?|oz|km|cm|mm|m|mi|ft|mph|km/h|m/s|ml|mL|L|mol|[kM]?W|kWh|V|"
          r"mA|A|px|dpi|fps|rpm|tokens?|USD|EUR|GBP|JPY|dollars?|euros?|cents?|percent")
_NUMBER_WITH_UNIT = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*[ \t]?(?:" + _UNITS + r")(?!\w)")
_CURRENCY = re.compile(r"[$€£¥][ \t]?\d+(?:[.,]\d+)*(?:[ \t]?(?:[kKmMbB]n?|million|billion)\b)?")
_IDENTIFIER = re.compile(  # the longest form first: parse_config() is one entity, not parse_config
    r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\(\)"  # func(), obj.method()
    r"|\b[A-Za-z_]\w+(?:\.[A-Za-z_]\w+)+\b"  # dotted.names (parts of 2+ chars: not e.g. / i.e.)
    r"|\b[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]+\b"  # snake_case, __dunder__
    r"|\b[a-z]+[A-Z][A-Za-z0-9]*\b"  # camelCase
    r"|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b"  # PascalCase with two humps
)
_MATH = re.compile(
    r"\\[A-Za-z]+|\$\$"  # LaTeX commands, display math
    r"|[∑∏∫∮∂∇√∞≤≥≠≈≡±∓×÷∈∉⊂⊃⊆⊇∪∩∀∃→⇒⇔↦∝⊥]"  # math symbols
    r"|(?<!\w)[α-ωΑ-Ω](?!\w)"  # a lone Greek letter (not Greek prose)
    r"|[\w)\]](?:\^|\*\*)[\w({]"  # x^2, a**b
    r"|[\w)\]][ \t]*(?:<=|>=|!=|==|=|<|>)[ \t]*[\w(\[-]"  # equations and comparisons
)
_CODE_SIGNAL = re.compile(
    r"^[ \t]*(?:def|class|function|fn|func)[ \t]+\w+[ \t]*[(:{<]"
    r"|^[ \t]*import[ \t]+[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*;?[ \t]*$"
    r"|^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+\w"
    r"|^[ \t]*#include[ \t]*[<\"]"
    r"|^[ \t]*(?:const|let|var)[ \t]+\w+[ \t]*="
    r"|^[ \t]*(?:public|private|protected)[ \t]+\w"
    r"|^[ \t]*(?:SELECT|INSERT[ \t]+INTO|UPDATE|DELETE[ \t]+FROM|CREATE[ \t]+TABLE)\b"
    r"|[;{][ \t]*$|^[ \t]*\}"
    r"|==|!=|&&|\|\||=>|\+\+|::|\w\(\)"
    r"|</?[a-z][a-z0-9]*(?:[ \t][^<>\n]*)?>",
    re.MULTILINE,
)

# ---------------------------------------------------------------------------------------------- lexicons

LEXICONS: dict[str, frozenset[str]] = {
    "code": frozenset("""
        python javascript typescript java rust golang kotlin swift php ruby scala haskell sql html css json yaml
        xml api function method variable loop array boolean compile compiler runtime debug debugger bug exception
        stack traceback recursion recursive algorithm regex database query server backend frontend endpoint http
        https docker kubernetes git github repository repo commit deploy deployment thread mutex async await
        concurrency pointer cache refactor framework library npm pip linux bash shell script syntax parse parser
        lambda def const struct enum void println printf stdout stderr segfault null nullptr typeerror valueerror
        unittest pytest numpy pandas django flask reactjs nodejs dockerfile microservice latency websocket
        class iterator generator decorator interface""".split()),
    "math": frozenset("""
        equation integral derivative matrix matrices vector eigenvalue eigenvector polynomial theorem lemma
        corollary calculus algebra geometry probability variance logarithm exponential integer fraction quadratic
        differential gradient topology manifold convergence converge factorial modulo permutation combinatorics
        hypotenuse triangle sine cosine trigonometry binomial bayes bayesian posterior stochastic inequality
        infinity infinitely asymptotic numerator denominator arithmetic determinant orthogonal gaussian regression
        statistic statistics statistical median deviation primes divisible isomorphism bijection""".split()),
    "science": frozenset("""
        protein enzyme dna rna gene genome molecule molecular atom atomic electron photon quantum neutron proton
        chemical catalyst oxidation entropy thermodynamics velocity acceleration momentum gravity gravitational
        relativity wavelength isotope organism bacteria virus vaccine antibody immune diagnosis symptom disease
        syndrome patient clinical dosage medication cancer tumor insulin diabetes hypertension cardiac neuron
        hormone metabolism mitochondria photosynthesis species ecosystem hydrogen oxygen nitrogen pathogen
        infection antibiotic chromosome mutation physics chemistry biology""".split()),
    "law": frozenset("""
        contract clause liability plaintiff defendant court statute lawsuit litigation attorney lawyer jurisdiction
        tort negligence copyright trademark patent gdpr compliance regulation regulatory legal illegal lawful
        unlawful indemnity indemnification arbitration breach damages verdict constitutional amendment precedent
        counsel warranty lease tenant landlord custody felony misdemeanor subpoena affidavit testimony prosecution
        judge jury licensing ordinance hereby herein thereof""".split()),
    "finance": frozenset("""
        stock equity dividend portfolio investment investor inflation mortgage loan revenue profit ebitda
        valuation cashflow liquidity asset tax accounting audit budget ledger hedge etf roi npv irr
        amortization depreciation credit debit bankruptcy cryptocurrency bitcoin forex trading trader broker
        brokerage fiscal monetary gdp recession ipo shareholder earnings pension annuity retirement invoice payroll
        financial finance economics economy""".split()),
}
_WORD_DOMAIN: dict[str, str] = {word: domain for domain in reversed(DOMAINS) for word in LEXICONS[domain]}


def _lexicon_domain(word: str) -> str | None:
    """The domain of a lower-cased word, trying it as written, then without a plural ending."""
    domain = _WORD_DOMAIN.get(word)
    if domain is None and len(word) > 3 and word.endswith("s"):
        if word.endswith("ies"):
            domain = _WORD_DOMAIN.get(word[:-3] + "y")
        domain = domain or _WORD_DOMAIN.get(word[:-1])
        if domain is None and word.endswith("es"):
            domain = _WORD_DOMAIN.get(word[:-2])
    return domain


# ---------------------------------------------------------------------------------------------- the parts


def split_code(text: str) -> tuple[str, list[str]]:
    """(prose, code segments): fenced blocks (an unclosed fence runs to the end) and `inline code` removed."""
    code: list[str] = []

    def take(match: re.Match[str], sep: str) -> str:
        code.append(match.group(0).strip("`~"))
        return sep

    prose = _FENCED.sub(lambda m: take(m, "\n"), text)
    prose = _INLINE_CODE.sub(lambda m: take(m, " "), prose)
    return prose, code


def count_sentences(prose: str) -> int:
    return sum(1 for piece in _SENTENCE_END.split(prose) if _WORD.search(piece))


def count_reasoning_keywords(prose: str) -> int:
    return sum(1 for _ in _REASONING.finditer(prose))


def question_depth(prose: str) -> int:
    questions = sum(1 for _ in _QUESTION.finditer(prose))
    items = sum(1 for _ in _ENUM_LINE.finditer(prose)) + sum(1 for _ in _ENUM_INLINE.finditer(prose))
    connectors = sum(1 for _ in _CONNECTORS.finditer(prose))
    return questions + items + connectors


def _proper_nouns(prose: str) -> set[str]:
    """Capitalised word runs; a run that starts a sentence loses its first word ("Paris is" → nothing)."""
    prose = _ENUM_MARKER.sub("", prose)
    found: set[str] = set()
    for match in _CAPITALIZED_RUN.finditer(prose):
        j = match.start() - 1
        while j >= 0 and prose[j] in _SKIP_BEFORE_WORD:  # total work is linear: it stops at the previous word
            j -= 1
        run = match.group(0)
        if j < 0 or prose[j] in _SENTENCE_START_CHARS:
            run = " ".join(run.split()[1:])
        if run:
            found.add(" ".join(run.split()))
    return found


def find_entities(text: str, prose: str | None = None) -> set[str]:
    """Distinct entity strings (see the module docstring); `prose` is `text` without code, if already split."""
    if prose is None:
        prose, _ = split_code(text)
    found = _proper_nouns(prose)
    found.update(a for a in _ACRONYM.findall(_SHOUTING.sub(" ", prose)) if a not in _UNIT_ACRONYMS)
    found.update(m.group(0).replace(" ", "").replace("\t", "") for m in _NUMBER_WITH_UNIT.finditer(text))
    found.update(m.group(0).replace(" ", "").replace("\t", "") for m in _CURRENCY.finditer(text))
    found.update(_IDENTIFIER.findall(text))
    return found


def _domain_counts(prose_words: list[str], num_code_words: int, num_math: int) -> tuple[int, dict[str, int]]:
    """(lexicon words in prose, per-domain scores: lexicon words, + words of code for code, + symbols for math)."""
    hits = dict.fromkeys(DOMAINS, 0)
    for word in prose_words:
        domain = _lexicon_domain(word.lower())
        if domain is not None:
            hits[domain] += 1
    num_prose_hits = sum(hits.values())
    hits["code"] += num_code_words
    hits["math"] += num_math
    return num_prose_hits, hits


def _best_domain(hits: dict[str, int], num_words: int) -> str:
    best = max(DOMAINS, key=lambda d: hits[d])  # ties: the first in DOMAINS
    return best if hits[best] >= max(1.0, 0.05 * num_words) else GENERAL


# ---------------------------------------------------------------------------------------------- public API


def extract_features(text: str) -> TextFeatures:
    if not isinstance(text, str):
        raise TypeError(f"extract_features takes a str, got {type(text).__name__}")
    text = text[:MAX_CHARS]
    prose, code = split_code(text)
    prose_words = _WORD.findall(prose)
    code_words = [w for segment in code for w in _WORD.findall(segment)]
    code_hits = sum(1 for w in code_words if _lexicon_domain(w.lower()) is not None)
    num_words = len(prose_words) + len(code_words)
    num_math = sum(1 for _ in _MATH.finditer(prose))
    num_prose_hits, hits = _domain_counts(prose_words, len(code_words), num_math)
    technical = num_prose_hits + len(code_words) + num_math
    return TextFeatures(
        num_words=num_words,
        num_sentences=count_sentences(prose),
        num_reasoning_keywords=count_reasoning_keywords(prose),
        num_entities=len(find_entities(text, prose)),
        question_depth=question_depth(prose),
        num_domain_terms=num_prose_hits + code_hits + num_math,
        domain_specificity=min(1.0, technical / num_words) if num_words else 0.0,
        has_code=bool(code) or _CODE_SIGNAL.search(prose) is not None,
        domain=_best_domain(hits, num_words),
    )


FEATURE_NAMES: tuple[str, ...] = (
    "log_num_words",
    "log_num_sentences",
    "log_num_reasoning_keywords",
    "log_num_entities",
    "log_question_depth",
    "log_num_domain_terms",
    "domain_specificity",
    "has_code",
    *(f"domain_{d}" for d in DOMAINS),
)


def feature_vector(features: TextFeatures) -> np.ndarray:
    """float32 in `FEATURE_NAMES` order: counts as log1p, the share as is, flags and the domain one-hot as 0/1."""
    counts = (features.num_words, features.num_sentences, features.num_reasoning_keywords, features.num_entities,
              features.question_depth, features.num_domain_terms)
    values = [math.log1p(c) for c in counts]
    values += [features.domain_specificity, float(features.has_code)]
    values += [float(features.domain == d) for d in DOMAINS]
    return np.asarray(values, dtype=np.float32)


def feature_matrix(texts: Iterable[str]) -> np.ndarray:
    """(n, len(FEATURE_NAMES)) float32: `feature_vector(extract_features(t))` for each text."""
    rows = [feature_vector(extract_features(t)) for t in texts]
    return np.stack(rows) if rows else np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)


# ---------------------------------------------------------------------------------------------- chats

_SYSTEM_ROLES = ("system", "developer")
CONTEXT_MAX_CHARS = 2_000  # per context part (system text, previous user turn), well under MAX_CHARS


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of the OpenAI list-of-parts form; anything else is ""."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, (list, tuple)):
        return ""
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "\n".join(p for p in parts if p)


def messages_to_text(messages: Any) -> str:
    """What the router classifies for a chat: system text, then the previous user turn, then the last user turn.

    The last user message is the request; the system prompt and one earlier user turn give it context (a "yes,
    do that" follows up on something). The context parts are cut to their first `CONTEXT_MAX_CHARS` each, so a
    long system prompt cannot push the request past the features' `MAX_CHARS`. Messages that are not dicts,
    have no string role, or have no text are skipped (an image-only last turn leaves the previous text turns);
    with no user message at all the system text is returned; odd input gives "" and never raises.
    """
    if not isinstance(messages, (list, tuple)):
        return ""
    system: list[str] = []
    user: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            continue
        role, text = message["role"].strip().lower(), _content_text(message.get("content"))
        if not text.strip():
            continue
        if role in _SYSTEM_ROLES:
            system.append(text)
        elif role == "user":
            user.append(text)
    if not user:
        return "\n".join(system)
    context = (["\n".join(system)] if system else []) + user[-2:-1]
    return "\n".join([part[:CONTEXT_MAX_CHARS] for part in context] + [user[-1]])
