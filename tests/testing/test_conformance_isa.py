"""Order invariance of the trained probes holds bit for bit whatever the processor's instruction set.

MKL's AVX-512 matrix kernels (taken on Intel processors) round a row by its position in the batch, its AVX2 ones
(taken on AMD) differ elsewhere; a suite run on one family only would miss the other. The probes score each item as
a batch of one (`TrainedMLP.predict`), and this test runs the order and subset comparisons exactly (no tolerance)
in fresh interpreters with `MKL_ENABLE_INSTRUCTIONS` set before torch loads, once per instruction set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from haldet.detectors.base import DETECTORS
from haldet.detectors.probe_training import TrainedMLP

PROBES = ["mind", "prism", "saplma", "icr_probe"]  # the detectors whose scores come from TrainedMLP.predict

SCRIPT = """
import json, sys
import numpy as np
from haldet.detectors.base import DETECTORS
from haldet.testing.conformance import Case
from haldet.testing.conformance.checks import same

out = {}
for name in sys.argv[1:]:
    cls = DETECTORS.get(name)
    for variant in list(cls.variants) or [None]:
        with Case(cls, {} if variant is None else {"variant": variant}) as case:
            base = np.asarray(case.base.values)
            perm = np.random.default_rng(3).permutation(len(case.test))
            shuffled = np.asarray(case.score([case.test[k] for k in perm]).values)
            half = len(case.test) // 2
            part = np.asarray(case.score(case.test[half:]).values)
            out[f"{name}-{variant}"] = {"finite": int(np.isfinite(base).sum()), "order": same(shuffled, base[perm]),
                                        "subset": same(part, base[half:])}
print(json.dumps(out))
"""


def _mlp(d_in: int, hidden: tuple[int, ...], n_out: int) -> TrainedMLP:
    from haldet.detectors.probe_training import MLP

    torch.manual_seed(0)
    net = MLP(d_in, hidden, n_out, 0.0)
    return TrainedMLP(d_in, hidden, n_out, 0.0, {k: v.clone() for k, v in net.state_dict().items()})


@pytest.mark.parametrize(("hidden", "n_out"), [((), 1), ((64,), 1), ((32, 16), 2)])
def test_probe_predict_is_free_of_batch_neighbours(hidden: tuple[int, ...], n_out: int) -> None:
    """Bit for bit: a permuted or partial batch gives each row the same probability. A single 48 -> 1 linear layer
    on 33 rows is order-dependent when batched on an AMD EPYC's AVX2 path (2e-8), so this fails for a batched
    forward there."""
    model = _mlp(48, hidden, n_out)
    X = np.random.default_rng(0).normal(size=(33, 48)).astype(np.float32)
    p = model.predict(X)
    perm = np.random.default_rng(1).permutation(len(X))
    assert np.array_equal(model.predict(X[perm]), p[perm])
    assert np.array_equal(model.predict(X[5:]), p[5:])
    assert np.array_equal(model.predict(X[7:8]), p[7:8])
    assert ((p > 0) & (p < 1)).all() and np.unique(p).size == len(p)


@pytest.mark.parametrize("isa", ["AVX2", "AVX512"])
def test_probe_order_checks_hold_under_each_instruction_set(isa: str) -> None:
    assert all(DETECTORS.get(name).trains for name in PROBES)
    env = {**os.environ, "MKL_ENABLE_INSTRUCTIONS": isa, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, *PROBES], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert {k.split("-")[0] for k in result} == set(PROBES)
    assert all(r["finite"] == 12 for r in result.values()), result
    assert {k: r for k, r in result.items() if not (r["order"] and r["subset"])} == {}
