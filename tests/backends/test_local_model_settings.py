"""The `hf` backend's local-model settings (`hf.*`): dtype, device maps, quantisation and attention kernel, on a
tiny randomly initialised Llama built here. A model dispatched by accelerate over an explicit per-layer map (its
hooks move every tensor to each layer's device, here all CPU) decodes, samples, reads evidence while decoding and
reads given responses exactly as the same model in one piece; settings that cannot work here are refused with
what is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from haldet.backends.base import EvidenceRequest, TokenRequest
from haldet.backends.hf.backend import HFBackend
from haldet.backends.hf.loading import converted_gguf_dir
from haldet.config import HFModelConfig, RunConfig
from haldet.errors import HaldetError
from haldet.util.assets import MODEL_ALIASES

PROMPTS = ["Question: what is two plus two?\nAnswer:", "Name a colour.\n", "Say something about rivers, please.\n"]
LAYER_MAP = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu",
             "model.norm": "cpu", "lm_head": "cpu"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    tok = AutoTokenizer.from_pretrained(str(converted_gguf_dir(MODEL_ALIASES["smollm2-135m"]())))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_settings_are_validated_by_the_config() -> None:
    cfg = RunConfig.model_validate({"hf": {"dtype": "fp16", "device_map": {"": "cpu"}}})
    assert cfg.hf.dtype == "fp16" and cfg.hf.device_map == {"": "cpu"} and cfg.hf.quantization is None
    with pytest.raises(ValueError, match="quantization"):
        RunConfig.model_validate({"hf": {"quantization": "3bit"}})
    assert RunConfig().hash() != cfg.hash()


def test_dtype_and_settings_reach_the_weights_and_the_fingerprint(tiny: Path) -> None:
    plain = HFBackend(str(tiny), device="cpu")
    half = HFBackend(str(tiny), device="cpu", settings=HFModelConfig(dtype="bf16", attn_implementation="eager"))
    assert plain.model.dtype == torch.float32 and half.model.dtype == torch.bfloat16
    assert half.model.config._attn_implementation == "eager"
    fp, hfp = plain.fingerprint(), half.fingerprint()
    assert fp["dtype"] == "torch.float32" and hfp["dtype"] == "torch.bfloat16"
    assert hfp["attn_implementation"] == "eager" and "attn_implementation" not in fp  # the default adds no key
    mapped = HFBackend(str(tiny), device="cpu", settings=HFModelConfig(device_map={"": "cpu"}))
    assert mapped.fingerprint()["device_map"] == {"": "cpu"}
    with pytest.raises(HaldetError, match="contradicts"):
        HFBackend(str(tiny), device="cpu", fast_numerics="bf16", settings=HFModelConfig(dtype="fp32"))


def test_reading_evidence_while_decoding_is_decided_once_whether_the_weights_are_loaded_or_not(tiny: Path) -> None:
    """Stage keys ask `fuses_evidence` before the weights load (the files' config names no attention kernel),
    after, and inside the reader's kernel swap: one answer each time, from the settings. Read from the loaded
    config, an eager model answered yes, then no, and a rerun recomputed its auxiliary records."""
    from haldet.backends.hf.answer_reader import reading_attention

    for kernel, fused in (("sdpa", True), ("eager", False)):
        backend = HFBackend(str(tiny), device="cpu", settings=HFModelConfig(attn_implementation=kernel))
        before = backend.fuses_evidence()
        assert backend._model is None and getattr(backend.model_config, "_attn_implementation", None) is None
        assert backend.model.config._attn_implementation == kernel
        with reading_attention(backend.model):
            inside = backend.fuses_evidence()
        assert before == backend.fuses_evidence() == inside == fused, kernel


def test_quantisation_and_flash_attention_are_refused_with_what_is_missing(tiny: Path, monkeypatch: Any) -> None:
    import importlib.util

    real = importlib.util.find_spec
    with pytest.raises(HaldetError) as err:  # bitsandbytes is not installed here
        HFBackend(str(tiny), device="cpu", settings=HFModelConfig(quantization="4bit"))
    if real("bitsandbytes") is None:
        assert "needs bitsandbytes" in err.value.args[0] and "haldet[quant]" in (err.value.hint or "")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "bitsandbytes"
                        else real(name, *a))
    with pytest.raises(HaldetError, match="needs a CUDA GPU"):  # bitsandbytes present, but no GPU
        HFBackend(str(tiny), device="cpu", settings=HFModelConfig(quantization="8bit"))
    with pytest.raises(HaldetError, match="flash-attn package and a CUDA GPU"):
        HFBackend(str(tiny), device="cpu", settings=HFModelConfig(attn_implementation="flash_attention_2"))


def test_a_model_dispatched_layer_by_layer_gives_the_same_answers_and_evidence(tiny: Path) -> None:
    from accelerate import dispatch_model

    plain = HFBackend(str(tiny), device="cpu")
    mapped = HFBackend(str(tiny), device="cpu", settings=HFModelConfig(device_map=LAYER_MAP))
    model = mapped.model  # every layer behind accelerate's hooks (weights offloaded, moved in for each call)
    dispatch_model(model, device_map=LAYER_MAP, main_device="cpu", force_hooks=True,
                   skip_keys=model._skip_keys_device_placement)
    assert hasattr(model.model.layers[1], "_hf_hook")
    a, b = (x.generate(PROMPTS, max_new_tokens=6, batch_size=2) for x in (plain, mapped))
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert np.allclose([o.token_logprobs for o in a], [o.token_logprobs for o in b], atol=1e-5)
    sa, sb = (x.sample(PROMPTS, k=3, temperature=1.0, top_p=0.9, seeds=[1, 2, 3], max_new_tokens=5, batch_size=9,
                       hidden=(-1, "mean")) for x in (plain, mapped))  # the K rows share their prompt's prefill
    assert [[o.token_ids for o in r] for r in sa] == [[o.token_ids for o in r] for r in sb]
    assert np.allclose(sa[0][1].extra["hidden"], sb[0][1].extra["hidden"], atol=1e-5)
    request = EvidenceRequest(layers=[0, 2], poolings=["mean", "last"], icr=True,
                              statements={"s": plain.encode_text(" Is that right?")})
    (ga, ea), (gb, eb) = (x.generate_with_evidence(PROMPTS, request, max_new_tokens=6, batch_size=2)
                          for x in (plain, mapped))
    assert [o.token_ids for o in ga] == [o.token_ids for o in gb] and ea is not None and eb is not None
    for x, y in zip(ea, eb, strict=True):
        assert np.allclose(x.output.pooled["mean"], y.output.pooled["mean"], atol=1e-5)
        assert np.allclose(x.output.icr, y.output.icr, atol=1e-4)
        assert np.allclose(x.output.branch_states["s"], y.output.branch_states["s"], atol=1e-5)
    given = [TokenRequest(plain.encode_prompt(p), plain.encode_text(" The sky is blue today."), str(i))
             for i, p in enumerate(PROMPTS)]
    ev = EvidenceRequest(layers=[-1, 1], poolings=["mean"])
    (ta, fa), (tb, fb) = (x.read_given(given, ev, top_k=3, entropies=True, attention=False, layers=False,
                                       batch_size=2, token_budget=64) for x in (plain, mapped))
    assert fa is not None and fb is not None
    for x, y, u, v in zip(ta, tb, fa, fb, strict=True):
        assert np.allclose(x.token_logprobs, y.token_logprobs, atol=1e-5) and (x.topk_ids == y.topk_ids).all()
        assert np.allclose(u.pooled["mean"], v.pooled["mean"], atol=1e-5)
    attn = mapped.token_pass(given, top_k=0, entropies=False, attention=True, batch_size=2)  # eager, hooks
    ref = plain.token_pass(given, top_k=0, entropies=False, attention=True, batch_size=2)
    assert all(np.allclose(x.attention, y.attention, atol=1e-5) for x, y in zip(attn, ref, strict=True))
