"""White-box detectors on synthetic signals with a planted linear hallucination direction (known answers),
noise-only controls, hand-computed formulas, and the no-test-label-access guarantee."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from haldet.detectors import sep as sep_module
from haldet.detectors.base import DETECTORS
from haldet.detectors.ccs import ccs_loss
from haldet.detectors.eigenscore import eigenscore
from haldet.detectors.probe_training import MIN_TRAIN, train_mlp
from haldet.detectors.sep import best_split_threshold
from haldet.evaluation.metrics import auroc
from haldet.schema import Generation, Instance
from haldet.signals import Signal, SignalView

L1, D, F_ICR, K = 4, 24, 6, 5  # layer rows (L + 1), hidden size, ICR features per layer, samples


def synth(n: int, *, planted: bool = True, seed: int = 0, rate: float = 0.3, strength: float = 2.0,
          layers: tuple[int, ...] | None = None) -> tuple[list[str], np.ndarray, dict[Signal, list], np.ndarray]:
    """Signals for n items; label 1 = hallucination with probability `rate`. With `planted`, every feature
    group moves along one unit direction w by +-strength according to the label (only at `layers` if given)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rate).astype(int)
    w = rng.normal(size=D)
    w /= np.linalg.norm(w)
    rows = range(L1) if layers is None else layers
    t = (2 * y - 1) * strength if planted else np.zeros(n)  # +strength for hallucinations

    last = rng.normal(size=(n, L1, D))
    mean = rng.normal(size=(n, L1, D))
    prism = rng.normal(size=(n, L1, D))
    sepf = rng.normal(size=(n, 2, L1, D))
    ccs = rng.normal(size=(n, 2, L1, D))
    for r in rows:
        last[:, r] += t[:, None] * w
        mean[:, r] += t[:, None] * w
        prism[:, r] += t[:, None] * w
        sepf[:, :, r] += t[:, None, None] * w
        ccs[:, 0, r] -= t[:, None] * w  # "the answer is correct" statement: true for correct answers
        ccs[:, 1, r] += t[:, None] * w  # its negation
    icr = rng.normal(size=(n, L1 - 1, F_ICR)) + (t[:, None, None] if planted else 0) * 0.6
    # EigenScore: hallucinated items' samples spread more
    spread = np.where(y == 1, 3.0, 0.5) if planted else np.ones(n)
    sample_hidden = rng.normal(size=(n, 1, D)) + spread[:, None, None] * rng.normal(size=(n, K, D))
    signals = {
        Signal.HIDDEN_LAST: list(last.astype(np.float32)), Signal.HIDDEN_MEAN: list(mean.astype(np.float32)),
        Signal.PRISM_FEATURES: list(prism.astype(np.float32)), Signal.SEP_FEATURES: list(sepf.astype(np.float32)),
        Signal.CCS_FEATURES: list(ccs.astype(np.float32)), Signal.ICR_FEATURES: list(icr.astype(np.float32)),
        Signal.SAMPLE_HIDDEN: list(sample_hidden.astype(np.float32)),
    }
    ids = [f"synth/test/{i}" for i in range(n)]
    return ids, y, signals, w


def make_view(ids: list[str], y: np.ndarray, signals: dict[Signal, list]) -> SignalView:
    pos = {i: k for k, i in enumerate(ids)}
    instances = [Instance(id=i, dataset="synth", scenario="qa_open", task_type="short_answer", question="q?",
                          references=["paris"]) for i in ids]
    generations = [Generation(id=i, prompt="p", response="it is rome" if y[k] else "it is paris", token_ids=[1],
                              token_logprobs=[-0.1], finish_reason="stop", n_tokens=1, model="m")
                   for k, i in enumerate(ids)]

    def loader(signal: Signal, wanted: list[str]) -> list:
        if signal not in signals:
            raise KeyError(signal)
        return [signals[signal][pos[i]] for i in wanted]

    return SignalView(ids=ids, instances=instances, generations=generations, loader=loader, labels=y.copy())


def splits(view: SignalView, seed: int = 42) -> tuple[SignalView, SignalView, SignalView]:
    order = np.random.default_rng(seed).permutation(len(view))
    a, b = int(0.6 * len(view)), int(0.8 * len(view))
    return (view.subset(order[:a], with_labels=True), view.subset(order[a:b], with_labels=True),
            view.subset(order[b:], with_labels=False))


def test_auroc(view: SignalView, test: SignalView, scores: np.ndarray) -> float:
    y = view.labels[[view.ids.index(i) for i in test.ids]]
    assert np.isfinite(scores).all()
    return auroc(y, scores)


test_auroc.__test__ = False  # a helper, not a test

PROBES = [("saplma", {}), ("mind", {}), ("prism", {}), ("icr_probe", {}), ("ccs", {"epochs": 300}),
          ("haloscope", {}), ("haloscope", {"variant": "label_guided"}), ("sep", {"variant": "accuracy"})]


@pytest.fixture(scope="module")
def planted():
    ids, y, signals, _ = synth(400, seed=1)
    return make_view(ids, y, signals)


@pytest.fixture(scope="module")
def noise():
    ids, y, signals, _ = synth(1000, planted=False, seed=2)
    return make_view(ids, y, signals)


@pytest.mark.parametrize(("name", "params"), PROBES, ids=[f"{n}-{p.get('variant', '')}" for n, p in PROBES])
def test_probe_finds_planted_direction(planted, name, params):
    train, val, test = splits(planted)
    det = DETECTORS.get(name)(**params)
    assert det.trains and det.family() == "white"
    det.fit(train, val)
    assert det.problem is None, det.problem
    out = det.score(test)
    assert test_auroc(planted, test, out.values) > 0.9


@pytest.mark.parametrize(("name", "params"), PROBES, ids=[f"{n}-{p.get('variant', '')}" for n, p in PROBES])
def test_probe_on_noise_stays_near_chance(noise, name, params):
    train, val, test = splits(noise)
    det = DETECTORS.get(name)(**params)
    det.fit(train, val)
    out = det.score(test)
    assert 0.35 < test_auroc(noise, test, out.values) < 0.65


def test_sep_faithful_predicts_binarised_semantic_entropy(planted, monkeypatch):
    """The faithful SEP trains on semantic entropy, not labels: entropy planted to follow the hidden direction."""
    se_of = {i: (2.0 if y else 0.2) + 0.05 * (k % 3) for k, (i, y) in
             enumerate(zip(planted.ids, planted.labels, strict=True))}
    seen: list[int] = []

    def fake_se(view, params, parent=None):
        seen.append(len(view))
        return np.array([se_of[i] for i in view.ids])

    monkeypatch.setattr(sep_module, "semantic_entropy_of", fake_se)
    train, val, test = splits(planted)
    train.labels = np.zeros(len(train), dtype=int)  # labels ignored by the faithful target ...
    train.labels[:5] = 1                              # ... beyond the protocol's two-class check
    det = DETECTORS.get("sep")()
    det.fit(train, val)
    assert det.problem is None and det.fit_info["targets"] == "binarised semantic entropy"
    assert 0.3 < det.fit_info["se_threshold"] < 2.0
    assert seen == [len(train)]  # entropy computed on train only (layer fixed: no validation search)
    assert test_auroc(planted, test, det.score(test).values) > 0.9


def test_eigenscore_hand_computed():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # rows centred over features: [.5,-.5], [-.5,.5], [0,0] -> cov eigenvalues 1, 0, 0 (+ alpha)
    expected = (math.log10(1.001) + 2 * math.log10(0.001)) / 3
    assert eigenscore(x) == pytest.approx(expected, abs=1e-12)
    two = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]])  # cov [[1, 2], [2, 4]]: eigenvalues 5, 0
    assert eigenscore(two) == pytest.approx((math.log10(5.001) + math.log10(0.001)) / 2, abs=1e-12)


def test_eigenscore_detector_validity_and_separation(planted):
    det = DETECTORS.get("eigenscore")()
    assert not det.trains and det.family() == "white"
    out = det.score(planted)
    assert auroc(planted.labels, out.values) > 0.9
    odd = [np.full((3, D), np.nan), np.vstack([np.ones((1, D)), np.full((2, D), np.nan)]), None,
           np.vstack([np.arange(D), np.full(D, np.nan), 2 * np.arange(D)])]
    ids = [f"d/s/{i}" for i in range(len(odd))]
    v = SignalView(ids=ids, instances=[], generations=[], loader=lambda s, w: [odd[ids.index(i)] for i in w])
    res = det.score(v)
    assert np.isnan(res.values[:3]).all() and "at least 2" in res.reasons[0] and "missing" in res.reasons[2]
    assert res.values[3] == pytest.approx(eigenscore(np.vstack([np.arange(D), 2 * np.arange(D)])))


def test_ccs_loss_hand_computed():
    p0, p1 = np.array([0.9, 0.2]), np.array([0.1, 0.6])
    # min terms .1^2, .2^2 -> .025; consistency (.9-.9)^2, (.2-.4)^2 -> .02
    assert float(ccs_loss(p0, p1)) == pytest.approx(0.045)
    assert ccs_loss(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]])).tolist() == pytest.approx([0.25])


def test_ccs_orientation_learned_on_train(planted):
    train, val, test = splits(planted)
    det = DETECTORS.get("ccs")(epochs=300)
    det.fit(train, val)
    assert len(det.fit_info["loss_by_start"]) == 10
    assert det.fit_info["loss_by_start"][det.fit_info["best_start"]] == min(det.fit_info["loss_by_start"])
    flipped = make_view(planted.ids, 1 - planted.labels, {s: planted.loader(s, planted.ids) for s in
                                                            [Signal.CCS_FEATURES]})
    tr2, va2, te2 = splits(flipped)
    det2 = DETECTORS.get("ccs")(epochs=300)
    det2.fit(tr2, va2)
    assert det2.fit_info["flipped"] != det.fit_info["flipped"]  # same unsupervised probe, opposite orientation
    np.testing.assert_allclose(det.score(test).values, 1 - det2.score(te2).values, atol=1e-12)


def test_best_split_threshold_hand_computed():
    assert best_split_threshold(np.array([0.0, 0.0, 0.1, 1.0, 1.1])) == pytest.approx(0.55)
    assert best_split_threshold(np.array([0.0, 1.0, 2.0, 10.0])) == pytest.approx(6.0)
    assert math.isnan(best_split_threshold(np.array([0.3, 0.3, 0.3])))


# No test-label / gold access, order and subset invariance: tests/testing/test_conformance.py checks every detector and
# variant through run_detector (the earlier label-shuffle test here could not fail: its test views had no labels).



@pytest.mark.parametrize("name", ["saplma", "mind", "prism", "icr_probe", "ccs", "haloscope", "sep"])
def test_too_few_or_single_class_training_items_give_nan_with_reason(planted, name):
    train, val, test = splits(planted)
    small = train.subset(range(MIN_TRAIN - 1), with_labels=True)
    params = {"variant": "accuracy"} if name == "sep" else {}
    for bad, words in ((small, "need at least"), (train.subset(np.flatnonzero(train.labels == 0)[:40],
                                                               with_labels=True), "single class")):
        det = DETECTORS.get(name)(**params)
        det.fit(bad, val)
        out = det.score(test)
        assert np.isnan(out.values).all()
        assert all(words in r for r in out.reasons), out.reasons[0]


def test_missing_features_give_nan_for_that_item_only(planted):
    train, val, test = splits(planted)
    values = list(test.get(Signal.HIDDEN_LAST))
    values[0] = None
    values[1] = np.full_like(values[2], np.nan)
    test._cache[Signal.HIDDEN_LAST] = values
    det = DETECTORS.get("saplma")()
    det.fit(train, val)
    out = det.score(test)
    assert np.isnan(out.values[:2]).all() and np.isfinite(out.values[2:]).all()
    assert out.reasons[0] == "feature missing for this item" and out.reasons[1] == "non-finite feature values"


def test_layer_chosen_on_validation():
    ids, y, signals, _ = synth(400, seed=3, layers=(1,))  # the direction lives in layer row 1 only
    v = make_view(ids, y, signals)
    train, val, test = splits(v)
    for name, params in (("saplma", {"layer": "val"}), ("sep", {"variant": "accuracy", "layer": "val"}),
                         ("haloscope", {})):
        det = DETECTORS.get(name)(**params)
        det.fit(train, val)
        assert det.fit_info["layer"] == 1, (name, det.fit_info)
        assert test_auroc(v, test, det.score(test).values) > 0.9


def test_mind_self_labelled_uses_reference_match_not_annotations(planted):
    train, val, test = splits(planted)
    train.labels = np.zeros(len(train), dtype=int)
    train.labels[:12] = 1  # wrong annotations: the self-labelled variant must not read them
    det = DETECTORS.get("mind")(variant="self_labelled")
    det.fit(train, val)
    assert det.fit_info["targets"].startswith("self-labelled")
    assert test_auroc(planted, test, det.score(test).values) > 0.9


def test_trainer_is_seeded_and_checkpoints_on_validation():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(80, 5)), rng.integers(0, 2, 80)
    a = train_mlp(X, y, hidden=[8], epochs=5, seed=7)
    b = train_mlp(X, y, hidden=[8], epochs=5, seed=7)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    c = train_mlp(X, y, hidden=[8], epochs=200, seed=7, val=(X[:20], y[:20]), select="loss", patience=3)
    assert c.info["epochs_run"] < 200 and c.info["best_epoch"] <= c.info["epochs_run"]


@pytest.mark.parametrize(("name", "params"), [("prism", {}), ("ccs", {"epochs": 50}), ("sep", {"variant": "accuracy"})])
def test_fitted_state_saved_and_reused(planted, tmp_path, name, params):
    from haldet.flow.scoring import fit_or_reuse, fitted_path
    from haldet.store import CellStore

    store = CellStore(tmp_path)
    train, val, test = splits(planted)
    first = DETECTORS.get(name)(**params)
    fit_or_reuse(first, store, name, "k1", train, val)
    assert fitted_path(store, name, "k1").exists() and first.meta["fitted"].startswith("fitted now")
    again = DETECTORS.get(name)(**params)
    again.fit = None  # a rerun with the same key must not fit
    fit_or_reuse(again, store, name, "k1", train, val)
    assert again.meta["fitted"].startswith("reused")
    np.testing.assert_array_equal(first.score(test).values, again.score(test).values)
    fitted_path(store, name, "k2").write_bytes(b"not a checkpoint")  # damaged: refitted, not trusted
    third = DETECTORS.get(name)(**params)
    fit_or_reuse(third, store, name, "k2", train, val)
    assert "fitted_reload_failed" in third.meta
    np.testing.assert_array_equal(first.score(test).values, third.score(test).values)


def test_haloscope_without_usable_validation_gives_nan_unless_defaults_are_asked(planted):
    """No hard-coded settings behind a number: single-class validation -> NaN with the reason; the fixed
    defaults only when asked, and then recorded."""
    train, val, test = splits(planted)
    single = val.subset(np.flatnonzero(val.labels == 0), with_labels=True)
    det = DETECTORS.get("haloscope")(epochs=5)
    det.fit(train, single)
    out = det.score(test)
    assert np.isnan(out.values).all() and "no validation labels of both classes" in out.reasons[0]
    flagged = DETECTORS.get("haloscope")(epochs=5, unlabelled_defaults=True)
    flagged.fit(train, single)
    assert np.isfinite(flagged.score(test).values).all()
    assert flagged.fit_info["settings_from"].startswith("fixed defaults") and "settings fixed" in flagged.meta["note"]


def test_binary_auroc_is_sklearns_value_bit_for_bit():
    """The probes' searches compare AUROCs with `>`: the fast AUROC must be sklearn's float exactly, ties included."""
    from sklearn.metrics import roc_auc_score

    from haldet.detectors.probe_training import binary_auroc

    rng = np.random.default_rng(3)
    checked = 0
    for trial in range(3000):
        n = int(rng.integers(2, 60))
        y = rng.integers(0, 2, n) * (3 if trial % 5 == 0 else 1)  # labels {0, 1} or {0, 3}
        if len(np.unique(y)) < 2:
            continue
        s = [rng.normal(size=n), rng.integers(0, 4, n).astype(float), np.round(rng.random(n), 2)][trial % 3]
        assert binary_auroc(y, s) == roc_auc_score(y, s), (y, s)
        checked += 1
    assert checked > 2500


def test_haloscope_trains_each_distinct_pseudo_labelling_once(planted, monkeypatch):
    """38 quantiles of tens of wild items repeat pseudo-labels; a repeat trains the same seeded classifier, so it is
    trained once, and the choice equals trying every quantile (first best validation AUROC wins)."""
    from haldet.detectors import haloscope as hs
    from haldet.detectors.probe_training import safe_auroc, train_mlps

    train, val, _ = splits(planted.subset(range(50), with_labels=True))
    calls = []

    def counting(Z, pseudos, **kw):  # type: ignore[no-untyped-def]
        calls.extend(pseudo.tobytes() for pseudo in pseudos)
        return train_mlps(Z, pseudos, **kw)  # side by side where two cores are free; sequential below

    monkeypatch.setattr(hs, "train_mlps", counting)
    det = DETECTORS.get("haloscope")(epochs=3)
    det.fit(train, val)
    assert det.problem is None and len(calls) == len(set(calls)) < det.params["n_quantiles"]
    # every quantile tried, as before
    p, info = det.params, det.fit_info
    F, ok, _ = det._features(train, det.layer)
    F = F[ok]
    s, Vt = np.linalg.svd(F - F.mean(axis=0), full_matrices=False)[1:]
    zeta = info["sign"] * hs.membership_scores(F, F.mean(axis=0), Vt, s, info["k"], p["weighted"])
    Z, Fv, okv = det.scaler.transform(F), *det._features(val, det.layer)[:2]
    Zv, yv = det.scaler.transform(Fv[okv]), np.asarray(val.labels)[okv]
    best = None
    for q in np.linspace(0, 1, p["n_quantiles"] + 2)[1:-1]:
        pseudo = (zeta > np.quantile(zeta, q)).astype(int)
        if len(np.unique(pseudo)) == 2:
            model = train_mlp(Z, pseudo, hidden=p["hidden"], n_out=1, epochs=3, batch_size=p["batch_size"], lr=p["lr"],
                              weight_decay=p["weight_decay"], optimizer=p["optimizer"], seed=p["seed"], device="cpu")
            auc = safe_auroc(yv, model.predict(Zv))
            if best is None or auc > best[0]:
                best = (auc, float(q))
    assert best == (info["classifier_val_auroc"], info["quantile"])
