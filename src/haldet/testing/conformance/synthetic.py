"""Synthetic evidence for the conformance checks: one maker per `Signal` and the views built from them.

Each maker returns per-item values that carry the label (so trained detectors can fit) and names the value an item
whose evidence is missing gets. A new signal type adds one `@signal_maker(Signal.X)` function here; a new detector
needs nothing. The views serve exactly the signals they are built for: reading any other raises `UndeclaredRead`,
which is how the checks see a detector reading what it does not declare. The variants of a view (`with_missing`,
`without_gold`, `with_units`, `flip_unit_labels`) change one thing each, so a check can say what an answer must not
depend on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from haldet.schema import Category, Generation, Instance, SpanLabel
from haldet.signals import CHERNOFF_EXPONENTS, KL_EXPONENTS, SampleTexts, Signal, SignalView
from haldet.stages.verdict_prompts import PROMPTS

N_ITEMS, LAYERS, DIM, K = 60, 3, 16, 5
MAX_TOKENS = 12  # token-aligned makers give this many positions; synthetic_view cuts them to each answer's length
TOKEN_ALIGNED = {"answer_entropies": 1, "token_offsets": 1, "token_topk_ids": 1, "token_topk_logprobs": 1,
                 "token_attention": 2, "token_entropies": 1, "token_chernoff": 1,
                 "answer_lm_logprobs": 1}  # signal value -> leading axes that run over answer tokens
TOKEN_ALIGNED_LAST = {"token_attn_logdiag", "token_attn_prev"}  # signals whose last axis runs over answer tokens
UNITS_PER_ITEM = 2  # units `with_units` gives every item at a unit level (per-unit makers follow it)


@dataclass(frozen=True)
class Maker:
    """Per-item synthetic values of one signal (`make(rng, y)`, y = 1 for hallucinated items) and the value an
    item whose evidence is missing gets."""

    make: Callable[[np.random.Generator, np.ndarray], list[Any]]
    missing: Any = None


SIGNAL_MAKERS: dict[Signal, Maker] = {}


def signal_maker(signal: Signal, missing: Any = None) -> Callable[[Callable[..., list[Any]]], Callable[..., list[Any]]]:
    """Register the synthetic maker of a signal type (one per signal; later registrations replace earlier)."""

    def decorate(fn: Callable[[np.random.Generator, np.ndarray], list[Any]]) -> Callable[..., list[Any]]:
        SIGNAL_MAKERS[signal] = Maker(fn, missing)
        return fn

    return decorate


def _direction(rng: np.random.Generator, y: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Gaussian noise of [n, *shape] moved by +-1.5 along one fixed unit direction of the last axis by label."""
    w = np.random.default_rng(7).normal(size=shape[-1])
    w /= np.linalg.norm(w)
    t = (2 * y - 1) * 1.5
    x = rng.normal(size=(len(y), *shape))
    return (x + t.reshape(-1, *([1] * len(shape))) * w).astype(np.float32)


_WORDS = ["paris", "rome", "berlin", "madrid", "lisbon", "vienna", "oslo", "prague", "dublin", "athens"]


def _answer(rng: np.random.Generator, hallucinated: bool) -> str:
    city = _WORDS[int(rng.integers(len(_WORDS)))] if hallucinated else "paris"
    return f"The capital is {city}. It is a large city."


def _trace(answer: str) -> str | None:
    """The reasoning a synthetic output thought before its answer (a reasoning model's outputs: every detector reads
    the answer unless it reads the trace, as RACE does); none for an empty answer."""
    return f"Let me recall the country. {answer}" if answer else None


@signal_maker(Signal.RESPONSE, missing="")
def _response(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    return [_answer(rng, bool(v)) for v in y]


@signal_maker(Signal.TOKEN_LOGPROBS, missing=np.zeros(0))
def _token_logprobs(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    return [-rng.gamma(1.0 + 2 * v, 0.3, size=int(rng.integers(3, 12))) for v in y]


@signal_maker(Signal.TOKEN_ENTROPIES)
def _token_entropies(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    return [rng.gamma(1.0 + 2 * v, 0.4, size=MAX_TOKENS) for v in y]


@signal_maker(Signal.TOKEN_CHERNOFF)
def _token_chernoff(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # the coefficients of real distributions over V = 1000 outputs: peaked ones (correct) sit further from uniform
    out = []
    for v in y:
        logits = rng.normal(size=(MAX_TOKENS, 1000)) * (3.0 - 1.5 * v)
        logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        cols = [np.logaddexp.reduce(g * logp, axis=1) - (1 - g) * np.log(1000) for g in CHERNOFF_EXPONENTS]
        for g in KL_EXPONENTS:  # KL(q || u) = sum q log q + log V, q the tempered distribution
            logq = g * logp - np.logaddexp.reduce(g * logp, axis=1, keepdims=True)
            cols.append((np.exp(logq) * logq).sum(axis=1) + np.log(1000))
        out.append(np.stack(cols, axis=1))
    return out


@signal_maker(Signal.ANSWER_LM_LOGPROBS)
def _answer_lm_logprobs(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # without the prompt the answer is less likely; hallucinated answers depend less on it (closer to the prompt's)
    return [-rng.gamma(3.0 - v, 0.5, size=MAX_TOKENS) for v in y]


@signal_maker(Signal.TOKEN_ATTN_PREV)
def _token_attn_prev(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # [L, H, T] in (0, 1); head 1 of every layer attends to the previous token, less so for hallucinated items
    out = []
    for v in y:
        a = rng.uniform(0.05, 0.3, size=(LAYERS, 2, MAX_TOKENS))
        a[:, 1] += rng.uniform(0.3, 0.6, size=(LAYERS, MAX_TOKENS)) * (1.0 - 0.6 * v)
        out.append(a.astype(np.float32))
    return out


@signal_maker(Signal.ANSWER_ENTROPIES)
def _answer_entropies(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    return [rng.gamma(1.0 + 2 * v, 0.4, size=MAX_TOKENS) for v in y]


@signal_maker(Signal.TOKEN_OFFSETS)
def _token_offsets(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # consecutive 4-character tokens over the synthetic answer
    return [np.stack([np.arange(0, 4 * MAX_TOKENS, 4), np.arange(4, 4 * MAX_TOKENS + 4, 4)], axis=1).astype(np.int64)
            for _ in y]


@signal_maker(Signal.TOKEN_TOPK_IDS)
def _token_topk_ids(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    return [np.stack([rng.permutation(1000)[:K] for _ in range(MAX_TOKENS)]).astype(np.int64) for _ in y]


@signal_maker(Signal.TOKEN_TOPK_LOGPROBS)
def _token_topk_logprobs(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # observed token first (less likely for hallucinated items), then alternatives in descending order
    out = []
    for v in y:
        alts = -np.sort(rng.gamma(2.0, 1.0, size=(MAX_TOKENS, K - 1)), axis=1)
        observed = -rng.gamma(1.0 + 2 * v, 0.4, size=(MAX_TOKENS, 1))
        out.append(np.concatenate([observed, alts], axis=1).astype(np.float32))
    return out


@signal_maker(Signal.TOKEN_ATTENTION)
def _token_attention(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    return [np.tril(rng.random((MAX_TOKENS, MAX_TOKENS)), k=-1).astype(np.float32) for _ in y]


@signal_maker(Signal.TOKEN_ATTN_LOGDIAG)
def _token_attn_logdiag(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # MAX_TOKENS tokens (as TOKEN_OFFSETS); hallucinated items attend less to themselves in layer 1
    return [(-rng.gamma(2.0, 1.0, size=(LAYERS, MAX_TOKENS)) - np.array([[0.0], [1.5 * v], [0.0]]))
            .astype(np.float32) for v in y]


@signal_maker(Signal.UNIT_HIDDEN_SCORES)
def _unit_hidden_scores(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # one column per unit of `with_units` (UNITS_PER_ITEM) and the whole answer last; layer 2 carries the label
    return [(rng.normal(size=(LAYERS + 1, UNITS_PER_ITEM + 1)) + np.array([[0.0], [0.0], [1.5 * v], [0.0]]))
            .astype(np.float32) for v in y]


@signal_maker(Signal.SAMPLES)
def _samples(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # correct items: consistent samples; hallucinated: scattered; one empty sample kept in place now and then
    out = []
    for v in y:
        s = [_answer(rng, bool(v) and rng.random() < 0.8) for _ in range(K)]
        if rng.random() < 0.2:
            s[int(rng.integers(K))] = ""
        out.append(SampleTexts(s, [_trace(a) for a in s]))
    return out


@signal_maker(Signal.TRACE_ANSWER_ENTROPIES)
def _trace_answer_entropies(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # the sampled answers read after the primary trace: more uncertain for hallucinated items; one sample without
    # an answer (NaN) now and then
    out = []
    for v in y:
        e = rng.gamma(1.0 + 2 * v, 0.5, size=K)
        if rng.random() < 0.2:
            e[int(rng.integers(K))] = np.nan
        out.append(e)
    return out


@signal_maker(Signal.SAMPLE_LOGLIKS)
def _sample_logliks(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    out = []
    for v in y:
        n = rng.integers(3, 12, size=K).astype(np.float64)
        out.append(np.stack([-n * rng.gamma(1.0 + v, 0.3, size=K), n], axis=1))
    return out


@signal_maker(Signal.SAMPLE_HIDDEN)
def _sample_hidden(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    spread = np.where(y == 1, 3.0, 0.5)
    return list((rng.normal(size=(len(y), 1, DIM)) + spread[:, None, None] * rng.normal(size=(len(y), K, DIM)))
                .astype(np.float32))


@signal_maker(Signal.VERBALIZED)
def _verbalized(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    return [f"Confidence: {np.clip(0.8 - 0.4 * v + rng.normal(0, 0.15), 0, 1):.2f}" if rng.random() > 0.1
            else "I cannot say." for v in y]


class _AnyAsk(dict[str, Any]):
    """Verdicts of every ask of one prompt: the synthetic judge answers any ask name `<prompt>[@<k>shot]`."""

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.split("@", 1)[0], default)


@signal_maker(Signal.VERDICT)
def _verdict(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    out = []
    for v in y:
        asks = _AnyAsk()
        for name, prompt in PROMPTS.items():
            ranked = sorted(prompt.labels, key=lambda lab: prompt.scores[lab])

            def verdict(bad: bool, ranked: list[str] = ranked) -> dict[str, Any]:
                label: str | None = ranked[-1] if (rng.random() < 0.8) == bad else ranked[0]
                if rng.random() < 0.1:
                    label = None
                return {"reply": str(label), "label": label, "reason": "" if label else "the reply states no verdict"}

            asks[name] = {"judge": "synthetic", **verdict(bool(v))}
            if getattr(prompt, "level", "response") != "response":  # one verdict per unit (see `with_units`)
                asks[name]["units"] = [verdict(False), verdict(bool(v))][:UNITS_PER_ITEM]
        out.append(asks)
    return out


@signal_maker(Signal.SELF_EVAL)
def _self_eval(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    out = []
    for v in y:
        p = float(np.clip(0.7 - 0.4 * v + rng.normal(0, 0.15), 0.01, 0.99))
        verdict = "correct" if p > 0.5 else "incorrect"  # the evaluator procedure's fields too (`decision` variants)
        out.append({"p_true": p, "logp_true": float(np.log(0.8 * p)), "text": verdict.title(), "procedure": "evaluator",
                    "decision": verdict, "logp_decision": float(np.log(max(p, 1 - p)))})
    return out


@signal_maker(Signal.CLAIM_P_TRUE)
def _claim_p_true(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # per unit kind, UNITS_PER_ITEM units (see `with_units`): the second one less believed for hallucinated items
    out = []
    for v in y:
        ps = [float(np.clip(0.7 - (0.4 * v if u == 1 else 0.0) + rng.normal(0, 0.15), 0.01, 0.99))
              for u in range(UNITS_PER_ITEM)]
        out.append({kind: [{"start": None, "end": None, "p_true": p} for p in ps]
                    for kind in ("claim", "sentence", "clause")})
    return out


for _sig, _shape in ((Signal.HIDDEN_MEAN, (LAYERS, DIM)), (Signal.HIDDEN_LAST, (LAYERS, DIM)),
                     (Signal.HIDDEN_FIRST_N, (LAYERS, DIM)), (Signal.HIDDEN_LAST_N, (LAYERS, DIM)),
                     (Signal.PRISM_FEATURES, (LAYERS, DIM)), (Signal.SEP_FEATURES, (2, LAYERS, DIM)),
                     (Signal.CCS_FEATURES, (2, LAYERS, DIM)), (Signal.ICR_FEATURES, (LAYERS - 1, 4))):
    signal_maker(_sig)(lambda rng, y, shape=_shape: list(_direction(rng, y, shape)))


@signal_maker(Signal.REDEEP_FEATURES)
def _redeep_features(rng: np.random.Generator, y: np.ndarray) -> list[Any]:
    # [L, H + 1]: hallucinated answers have lower external-context scores in head 0 and a higher PKS in layer 0
    out = []
    for v in y:
        x = rng.normal(0.0, 0.3, size=(LAYERS, 4)).astype(np.float32)
        x[0, 0] -= 1.5 * v
        x[0, -1] += 1.5 * v
        out.append(x)
    return out


# ---------------------------------------------------------------------------------------------------- views
class UndeclaredRead(KeyError):
    """A detector read a signal its `signals()` does not name (the synthetic view serves no other)."""


def synthetic_view(signals: frozenset[Signal] | set[Signal], n: int = N_ITEMS, seed: int = 0) -> SignalView:
    """A labelled view of n items serving exactly `signals` (any other signal raises: undeclared reads fail).
    Instances carry references, incorrect answers and a source row, so gold access is observable."""
    unknown = sorted(set(signals) - set(SIGNAL_MAKERS))
    if unknown:
        raise KeyError(f"no synthetic maker for signal(s) {unknown}: add a @signal_maker in "
                       "haldet/testing/conformance/synthetic.py")
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % 5 < 2).astype(int)[rng.permutation(n)]  # 40% hallucinated, both classes everywhere
    values = {s: SIGNAL_MAKERS[s].make(np.random.default_rng([seed, list(Signal).index(s)]), y)
              for s in sorted(signals | {Signal.RESPONSE, Signal.TOKEN_LOGPROBS})}
    for s in signals:  # token-level signals follow each item's answer length (the TOKEN_LOGPROBS draw)
        axes = TOKEN_ALIGNED.get(s.value, 0)
        if axes:
            values[s] = [a[tuple([slice(0, len(lp))] * axes)] for a, lp in
                         zip(values[s], values[Signal.TOKEN_LOGPROBS], strict=True)]
        elif s.value in TOKEN_ALIGNED_LAST:
            values[s] = [a[..., : len(lp)] for a, lp in zip(values[s], values[Signal.TOKEN_LOGPROBS], strict=True)]
    ids = [f"synth/test/{i}" for i in range(n)]
    instances = [Instance(id=i, dataset="synth", scenario="qa_open", task_type="short_answer",
                          question="What is the capital of France?", references=["Paris"], incorrect=["Rome"],
                          context="France is a country in Europe. Its capital is Paris, a large city.",
                          source={"answer": "Paris"}) for i in ids]
    generations = [_generation(i, values[Signal.RESPONSE][k], values[Signal.TOKEN_LOGPROBS][k])
                   for k, i in enumerate(ids)]
    return _view(ids, instances, generations, {s: v for s, v in values.items() if s in signals}, y, signals)


def _generation(item_id: str, response: str, logprobs: Any) -> Generation:
    lp = [float(x) for x in np.asarray(logprobs)]
    return Generation(id=item_id, prompt="p", response=response, token_ids=list(range(len(lp))), token_logprobs=lp,
                      finish_reason="stop", n_tokens=len(lp), model="smollm2-135m", reasoning=_trace(response))


def _view(ids: list[str], instances: list[Instance], generations: list[Generation], values: dict[Signal, list[Any]],
          y: np.ndarray | None, declared: frozenset[Signal] | set[Signal]) -> SignalView:
    pos = {i: k for k, i in enumerate(ids)}

    def loader(signal: Signal, wanted: Any) -> list[Any]:
        if signal not in declared:
            raise UndeclaredRead(f"read undeclared signal {signal!s}")
        return [values[signal][pos[i]] for i in wanted]

    return SignalView(ids=list(ids), instances=list(instances), generations=list(generations), loader=loader,
                      labels=None if y is None else np.asarray(y).copy())


def with_missing(view: SignalView, broken: list[int]) -> SignalView:
    """The same view with every signal of the items at `broken` missing (None, or an empty response/token list)."""
    declared = {s for s in SIGNAL_MAKERS if _serves(view, s)}
    values = {s: list(view.get(s)) for s in declared}
    gens = list(view.generations)
    for k in broken:
        for s in declared:
            values[s][k] = SIGNAL_MAKERS[s].missing
        gens[k] = _generation(view.ids[k], SIGNAL_MAKERS[Signal.RESPONSE].missing, np.zeros(0))
    return _view(view.ids, view.instances, gens, values, view.labels, declared)


def without_gold(view: SignalView, scored: set[str], seed: int = 1) -> SignalView:
    """The same view with the gold fields of the `scored` items replaced (references, incorrect answers and
    source row swapped or deleted) and their labels shuffled among themselves."""
    rng = np.random.default_rng(seed)
    instances = []
    for k, inst in enumerate(view.instances):
        if inst.id in scored:
            inst = inst.model_copy(update={"references": ["Rome"] if k % 2 else [], "incorrect": ["Paris"][: k % 2],
                                           "source": {}})
        instances.append(inst)
    declared = {s for s in SIGNAL_MAKERS if _serves(view, s)}
    labels = np.asarray(view.labels).copy()
    pos = [k for k, i in enumerate(view.ids) if i in scored]
    labels[pos] = rng.permutation(labels[pos]) if len(set(labels[pos])) > 1 else 1 - labels[pos]
    return _view(view.ids, instances, view.generations, {s: view.get(s) for s in declared}, labels, declared)


def _serves(view: SignalView, signal: Signal) -> bool:
    try:
        view.loader(signal, view.ids[:1])
    except KeyError:
        return signal in (Signal.RESPONSE, Signal.TOKEN_LOGPROBS)
    return True


# ---------------------------------------------------------------------------------------------------- unit levels
def with_units(view: SignalView, level: str) -> SignalView:
    """The view's instances carrying their response and UNITS_PER_ITEM (two) units of kind `level` over it (the
    second one hallucinated for hallucinated items), so unit-level scoring has something to align to."""
    instances = []
    labels = np.zeros(len(view), dtype=int) if view.labels is None else view.labels
    for inst, gen, y in zip(view.instances, view.generations, labels, strict=True):
        text = gen.response
        end = min(len(text), 4 * gen.n_tokens)  # the span the synthetic 4-character tokens cover
        cut = end // 2
        units = [SpanLabel(start=0, end=cut, category=Category.CORRECT, text=text[:cut], kind=level),
                 SpanLabel(start=cut, end=end, category=Category.HALLUCINATION if y else Category.CORRECT,
                           text=text[cut:end], kind=level)]
        instances.append(inst.model_copy(update={"response": text, "units": units}))
    declared = {s for s in SIGNAL_MAKERS if _serves(view, s)}
    return _view(view.ids, instances, view.generations, {s: view.get(s) for s in declared}, view.labels, declared)


def flip_unit_labels(view: SignalView) -> SignalView:
    """The view with every unit's label swapped (correct <-> hallucinated)."""
    flip = {Category.CORRECT: Category.HALLUCINATION, Category.HALLUCINATION: Category.CORRECT}
    instances = [inst.model_copy(update={"units": [u.model_copy(update={"category": flip.get(u.category, u.category)})
                                                   for u in inst.units]}) for inst in view.instances]
    declared = {s for s in SIGNAL_MAKERS if _serves(view, s)}
    return _view(view.ids, instances, view.generations, {s: view.get(s) for s in declared}, view.labels, declared)
