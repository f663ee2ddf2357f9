"""haldet beside lm-polygraph 0.7 on the same model, prompts, generation settings and estimators, whole runs alternated.

Both sides run the embedded SmolLM2-135M (fp32, CPU) on the same N HaluEval-QA prompts (the chat-rendered prompt
strings haldet decodes, passed to lm-polygraph as they are, without its chat templating), greedy answers of at most
64 new tokens, K=5 samples at temperature 1.0 and top-p 0.9 (lm-polygraph's top-k 50 turned off, its newline
suppression turned off: haldet has neither), and four estimators:

| lm-polygraph | haldet |
|---|---|
| `Perplexity` (greedy log-likelihoods) | `perplexity` |
| `MeanTokenEntropy` (greedy tokens' entropy) | `entropy` |
| `LexicalSimilarity("rougeL")` (samples) | `lexical_similarity` |
| `EigenScore` (samples' middle-layer last-token states) | `eigenscore` (sample `hidden_layer` 15 = 30 // 2, `last`) |

Each contender is a fresh process (imports, model loading and all: what a user waits for), run in turn:
haldet (`haldet.run` in a fresh run directory), then lm-polygraph's `UEManager` at each batch size asked for
(`--batch-sizes`; 1 is lm-polygraph's default, the batch size of its `estimate_uncertainty`). lm-polygraph runs
with its default stat calculators (`output_attentions=True`, greedy hidden states kept) and, as `lean`, with those
two outputs off (none of the four estimators reads them): its fastest configuration is `best`. `--repeat R`
repeats the round and keeps each contender's fastest run. Reported per contender: wall seconds of the process,
the seconds of the work alone (the same span on both sides: loading the tokenizer and model, decoding, scoring,
with torch and transformers imported before it; for haldet its whole `haldet.run`, for lm-polygraph its loading and
`UEManager` call), CPU seconds, and the greedy answers compared with haldet's (share identical after stripping the
end-of-turn token). lm-polygraph lives in its own virtualenv (`--peer-python`); when it is absent the benchmark
says so and exits 0.

The model: haldet's converted copy of the embedded GGUF (transformers 5 writes it); lm-polygraph's transformers 4.57
reads it through a copy of its config with `rope_theta` spelled the old way (without it, 4.x silently uses 10,000
instead of 100,000 and every answer differs) and the tokenizer loaded as `PreTrainedTokenizerFast`.

  python benchmarks/peers_lmpolygraph.py [--n 20] [--batch-sizes 1] [--lean-batch-sizes 20] [--repeat 1]
      [--threads 2] [--peer-python PEER_VENV/bin/python] [--peer-path DIR] [--store NAME] [--check NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
MAX_NEW_TOKENS, K, TEMPERATURE, TOP_P, MIDDLE = 64, 5, 1.0, 0.9, 15
HALDET_DETECTORS = ["perplexity", "entropy", "lexical_similarity", "eigenscore"]
PAIRS = {"perplexity": "Perplexity", "entropy": "MeanTokenEntropy", "lexical_similarity": "LexicalSimilarity_rougeL",
         "eigenscore": "EigenScore"}


# -- haldet child (the main virtualenv) -----------------------------------------------------------------------------
def haldet_child(n: int, threads: int, out: Path) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    # the libraries both sides need, imported before the work is timed, as the peer's child imports its own
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import haldet as pipeline
    from haldet.config import RunConfig
    from haldet.store.reader import RunReader
    from haldet.util.threads import configure_threads

    configure_threads(threads)
    config = RunConfig.model_validate({
        "limit": n, "detectors": HALDET_DETECTORS,
        "generation": {"max_new_tokens": MAX_NEW_TOKENS},
        "sample": {"k": K, "temperature": TEMPERATURE, "top_p": TOP_P, "max_new_tokens": MAX_NEW_TOKENS,
                   "hidden_layer": MIDDLE, "hidden_pooling": "last"}})
    with tempfile.TemporaryDirectory() as tmp:
        work = time.perf_counter()
        _, cells = pipeline.run(config, Path(tmp))
        work = time.perf_counter() - work
        cell = cells[0]
        if cell.error:
            raise SystemExit(f"haldet: the cell failed: {cell.error}")
        cell_reader = RunReader(tmp).cell("halueval_qa", "smollm2-135m")
        records = cell_reader.records("generate")
        scores = {d.name: {i: v for i, v in cell_reader.scores(cell_reader.log_of(d.name)).values().items()}
                  for d in cell.detectors}
    result = {"work_s": round(work, 2), "stage_s": {k: round(v, 2) for k, v in cell.timings.items()},
              "detectors_s": {d.name: round(d.fit_seconds + d.score_seconds, 3) for d in cell.detectors},
              "detector_errors": {d.name: d.error for d in cell.detectors if d.error},
              "prompts": {i: r["prompt"] for i, r in records.items()},
              "answers": {i: r["response"] for i, r in records.items()}, "scores": scores}
    result["process_wall_s"] = round(time.perf_counter() - wall, 2)
    result["process_cpu_s"] = round(time.process_time() - cpu, 2)
    out.write_text(json.dumps(result))


# -- lm-polygraph child (the peers' virtualenv: imports nothing of haldet) -------------------------------------------
def polygraph_child(model_dir: Path, prompts_file: Path, batch_size: int, lean: bool, threads: int, out: Path) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    import types

    import torch
    from lm_polygraph.defaults.register_default_stat_calculators import register_default_stat_calculators
    from lm_polygraph.estimators import EigenScore, LexicalSimilarity, MeanTokenEntropy, Perplexity
    from lm_polygraph.stat_calculators import SamplingGenerationCalculator
    from lm_polygraph.utils.builder_enviroment_stat_calculator import BuilderEnvironmentStatCalculator
    from lm_polygraph.utils.dataset import Dataset
    from lm_polygraph.utils.generation_parameters import GenerationParameters
    from lm_polygraph.utils.manager import UEManager
    from lm_polygraph.utils.model import WhiteboxModel
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    items = json.loads(prompts_file.read_text())
    ids, prompts = list(items), list(items.values())
    work = time.perf_counter()  # from the tokenizer and model loading on, as haldet's run loads its own
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"), padding_side="left")
    meta = json.loads((model_dir / "tokenizer_config.json").read_text())
    tokenizer.add_special_tokens({k: meta[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                                  if k in meta})
    tokenizer.model_input_names = ["input_ids", "attention_mask"]  # no token_type_ids: a causal LM refuses them
    # attention weights (the default stat calculators ask for them) come only from eager attention in transformers 4.57
    hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32,
                                              attn_implementation="sdpa" if lean else "eager").eval()
    params = GenerationParameters(temperature=TEMPERATURE, top_k=0, top_p=TOP_P, allow_newlines=True)
    model = WhiteboxModel(hf, tokenizer, str(model_dir), "CausalLM", params)
    # K samples: lm-polygraph builds SamplingGenerationCalculator with no arguments (10 samples); a builder module
    # that gives it K
    builder = types.ModuleType("peers_lmpolygraph_builder")
    builder.load_stat_calculator = lambda cfg, env: SamplingGenerationCalculator(samples_n=K)  # type: ignore[attr-defined]
    sys.modules[builder.__name__] = builder
    calculators = register_default_stat_calculators("Whitebox", output_attentions=not lean,
                                                    output_hidden_states=not lean)
    for c in calculators:
        if c.name == "SamplingGenerationCalculator":
            c.builder = builder.__name__
    estimators = [Perplexity(), MeanTokenEntropy(), LexicalSimilarity("rougeL"), EigenScore()]
    manager = UEManager(Dataset(prompts, [""] * len(prompts), batch_size=batch_size), model, estimators,
                        builder_env_stat_calc=BuilderEnvironmentStatCalculator(model),
                        available_stat_calculators=calculators, generation_metrics=[], ue_metrics=[], processors=[],
                        ignore_exceptions=False, verbose=False, max_new_tokens=MAX_NEW_TOKENS)
    manager()
    work = time.perf_counter() - work
    texts = manager.stats["greedy_texts"]
    scores = {str(e): dict(zip(ids, map(float, manager.estimations[e.level, str(e)]), strict=True))
              for e in estimators}
    result = {"work_s": round(work, 2), "answers": dict(zip(ids, texts, strict=True)), "scores": scores,
              "process_wall_s": round(time.perf_counter() - wall, 2),
              "process_cpu_s": round(time.process_time() - cpu, 2)}
    out.write_text(json.dumps(result))


# -- the parent: prepare, alternate, compare ------------------------------------------------------------------------
def old_style_copy(converted: Path, target: Path) -> Path:
    """haldet's converted model dir as transformers 4.x reads it: `rope_theta` at the top of the config."""
    target.mkdir(parents=True, exist_ok=True)
    config = json.loads((converted / "config.json").read_text())
    rope = config.get("rope_parameters") or {}
    if "rope_theta" not in config and "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
    (target / "config.json").write_text(json.dumps(config))
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if not (target / name).exists():
            (target / name).symlink_to(converted / name)
    return target


def run_child(argv: list[str], python: str, env: dict[str, str]) -> tuple[dict[str, Any], float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        t0 = os.times()
        wall = time.perf_counter()
        proc = subprocess.run([python, str(HERE), *argv, "--child-out", str(out)], env=env, capture_output=True,
                              text=True)
        wall = time.perf_counter() - wall
        t1 = os.times()
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:2])} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text()), wall, (t1.children_user + t1.children_system
                                                   - t0.children_user - t0.children_system)


def normalised(text: str) -> str:
    return text.replace("<|im_end|>", "").strip()


def spearman(a: list[float], b: list[float]) -> float | None:
    import numpy as np
    from scipy.stats import spearmanr

    x, y = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(x) & np.isfinite(y)
    return None if ok.sum() < 3 else round(float(spearmanr(x[ok], y[ok]).statistic), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--batch-sizes", default="1", help="lm-polygraph batch sizes, default stat calculators "
                        "(1: its default)")
    parser.add_argument("--lean-batch-sizes", default="20", help="lm-polygraph batch sizes with attentions and "
                        "greedy hidden states off")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer-python", default=os.environ.get("HALDET_PEER_PYTHON", "peers/bin/python"))
    parser.add_argument("--peer-path", default="", help="folders put first on the peer's PYTHONPATH (e.g. a "
                        "pyarrow built for its numpy, when its virtualenv's own does not import)")
    parser.add_argument("--keep", type=Path, help="also keep each run's raw output (answers, scores) in this folder")
    parser.add_argument("--store", metavar="NAME")
    parser.add_argument("--check", metavar="NAME")
    parser.add_argument("--child", choices=["haldet", "lmpolygraph"], help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--prompts", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--lean", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "haldet":
        return haldet_child(args.n, args.threads, args.child_out)
    if args.child == "lmpolygraph":
        return polygraph_child(args.model_dir, args.prompts, args.batch_size, args.lean, args.threads, args.child_out)

    peer = Path(args.peer_python)
    peer_env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONPATH": args.peer_path}
    probe = subprocess.run([str(peer), "-c", "import lm_polygraph"], capture_output=True, text=True, env=peer_env) \
        if peer.exists() else None
    if probe is None or probe.returncode != 0:
        why = "no such interpreter" if probe is None else "import failed: " + probe.stderr.strip().splitlines()[-1]
        print(f"skipped: no usable lm-polygraph at {peer} ({why}); install it in a separate virtualenv and pass "
              "--peer-python (and --peer-path for a package it needs from elsewhere)", file=sys.stderr)
        return
    sys.path.insert(0, str(HERE.parent))
    from results import finish  # benchmarks/results.py: stored figures, --store and --check

    from haldet.backends.hf.loading import converted_gguf_dir, resolve_model_path

    env = {**peer_env, "PYTHONPATH": os.pathsep.join(
        p for p in [str(HERE.parents[1] / "src"), os.environ.get("PYTHONPATH", "")] if p)}
    _, gguf = resolve_model_path("smollm2-135m")
    assert gguf is not None
    report: dict[str, Any] = {"n_items": args.n, "dataset": "halueval_qa", "model": "smollm2-135m (fp32, CPU)",
                              "threads": args.threads, "max_new_tokens": MAX_NEW_TOKENS, "k": K,
                              "temperature": TEMPERATURE, "top_p": TOP_P, "estimators": PAIRS,
                              "peer": subprocess.run([str(peer), "-c", "import importlib.metadata as m; "
                                                      "print(m.version('lm-polygraph'), m.version('transformers'))"],
                                                     capture_output=True, text=True, env=peer_env).stdout.split(),
                              "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    lean = [int(b) for b in args.lean_batch_sizes.split(",") if b]
    contenders = ["haldet"] + [f"lm-polygraph bs={b}" for b in sizes] + [f"lm-polygraph bs={b} lean" for b in lean]
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = old_style_copy(converted_gguf_dir(gguf), Path(tmp) / "model")
        prompts_file = Path(tmp) / "prompts.json"
        haldet_out: dict[str, Any] | None = None
        for attempt in range(args.repeat):
            for name in contenders:
                if name == "haldet":
                    argv, python = ["--child", "haldet", "--n", str(args.n), "--threads", str(args.threads)], \
                        sys.executable
                else:
                    assert haldet_out is not None
                    bs = int(name.split("bs=")[1].split()[0])
                    argv = ["--child", "lmpolygraph", "--model-dir", str(model_dir), "--prompts", str(prompts_file),
                            "--batch-size", str(bs), "--threads", str(args.threads)] + (
                        ["--lean"] if name.endswith("lean") else [])
                    python = str(peer)
                load = round(os.getloadavg()[0], 2)
                out, wall, cpu = run_child(argv, python, env if name == "haldet" else peer_env)
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    (args.keep / f"{name.replace(' ', '_')}-{attempt}.json").write_text(json.dumps(out))
                if name == "haldet":
                    haldet_out = out
                    prompts_file.write_text(json.dumps(out["prompts"]))
                row = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "work_s": out["work_s"],
                       "loadavg_at_start": load}
                if name != "haldet":
                    assert haldet_out is not None
                    same = [normalised(out["answers"][i]) == normalised(a) for i, a in haldet_out["answers"].items()]
                    row["greedy_identical"] = f"{sum(same)}/{len(same)}"
                    ids = list(haldet_out["answers"])
                    row["score_spearman_vs_haldet"] = {
                        h: spearman([haldet_out["scores"].get(h, {}).get(i, float("nan")) for i in ids],
                                    [out["scores"][p].get(i, float("nan")) for i in ids])
                        for h, p in PAIRS.items()}
                else:
                    row.update(stage_s=out["stage_s"], detectors_s=out["detectors_s"],
                               detector_errors=out["detector_errors"])
                runs[name].append(row)
                print(f"{name} (run {attempt + 1}/{args.repeat}): {row['wall_s']} s wall, {row['work_s']} s work"
                      + (f", {row.get('greedy_identical')} greedy answers identical" if name != "haldet" else
                         f", stages {row['stage_s']}, detectors {row['detectors_s']}"),
                      file=sys.stderr, flush=True)
    best = {name: {**min(done, key=lambda r: r["wall_s"]), "runs_wall_s": [r["wall_s"] for r in done]}
            for name, done in runs.items()}
    report["contenders"] = best
    peers = {k: v for k, v in best.items() if k != "haldet"}
    default = best.get("lm-polygraph bs=1")
    fastest = min(peers, key=lambda k: peers[k]["wall_s"])
    report["lmpolygraph_default"] = "lm-polygraph bs=1" if default else None
    report["lmpolygraph_best"] = fastest
    h = best["haldet"]
    report["speedup_vs_default"] = round(default["wall_s"] / h["wall_s"], 2) if default else None
    report["speedup_vs_best"] = round(peers[fastest]["wall_s"] / h["wall_s"], 2)
    report["speedup_work_vs_best"] = round(peers[fastest]["work_s"] / h["work_s"], 2)
    report["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    finish("peers_lmpolygraph", report, args.store, args.check)


if __name__ == "__main__":
    main()
