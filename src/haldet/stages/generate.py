"""The `generate` stage: the primary answer of each item, with its token ids and log-probabilities.

An item whose instance carries its `response` (a suite whose answers ship with the data) is not generated: its
response is teacher-forced through the model (`stages/tokens.py`), and the record says `provided: true`.
When a selected detector reads a token-level signal, the same token pass records it (for generated answers it runs
over the exact generated ids), and the key names the parts computed; otherwise the key is the plain generation's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from haldet.backends.base import EvidenceRequest, ForwardOutput, TokenOutput, TokenRequest
from haldet.backends.select import reasoning_settings
from haldet.config import stage_key
from haldet.errors import HaldetError
from haldet.schema import Generation
from haldet.signals import Signal
from haldet.stages.base import STAGES, DecodingReader, Item, Stage
from haldet.stages.plan import plan
from haldet.stages.tokens import (
    TOKEN_PASS_SIGNALS,
    beyond_context,
    parts_in_decoding,
    run_given_pass,
    run_token_pass,
    token_record,
    token_spec,
)
from haldet.text.reasoning import GivenParts, Markers, no_answer_reason, split_given
from haldet.util.limits import by_limit, max_new_tokens


@STAGES.register("generate")
class GenerateStage(Stage):
    provides = frozenset({Signal.RESPONSE, Signal.TOKEN_LOGPROBS, *TOKEN_PASS_SIGNALS})

    def key(self, item: Item) -> str:
        fingerprint = self.ctx.backend.fingerprint()
        spec = token_spec(self.ctx)
        response = item.instance.response
        if response is not None:
            given: dict[str, Any] = {"provided": response}
            markers = self._given_markers()
            if markers is not None and split_given(response, markers) is not None:  # keys of plain responses stay
                given["reasoning_split"] = markers.spec()
            return stage_key(self.name, fingerprint, item.prompt, given, spec)
        limit = max_new_tokens(self.ctx.config, item.instance)
        if spec["parts"]:  # a generated answer's token parts read while decoding say so (equal within tolerance)
            return stage_key(self.name, fingerprint, item.prompt, limit,
                             {**spec, "read": "decoding"} if parts_in_decoding(self.ctx) else spec)
        return stage_key(self.name, fingerprint, item.prompt, limit)

    def items_per_batch(self) -> int:
        # enough prompts per stored shard for the decoding pool to stay full (continuous batching)
        return max(self.ctx.config.generation.batch_size * 4, self.pool_rows() * 2)

    def compute(self, batch: list[Item]) -> list[dict[str, Any]]:
        generated = [item for item in batch if item.instance.response is None]
        provided = [item for item in batch if item.instance.response is not None]
        records: dict[str, dict[str, Any]] = {}
        arrays: dict[str, dict[str, np.ndarray]] = {}
        if generated:
            records.update(self._generate(generated, arrays))
        if provided:
            records.update(self._teacher_force(provided, arrays))
        if any(arrays.values()):
            shard = self.ctx.store.arrays(self.name).write({i: a for i, a in arrays.items() if a})
            for item_id, arrs in arrays.items():
                if arrs:
                    records[item_id]["tokens"].update(shard=shard, arrays={k: list(v.shape) for k, v in arrs.items()})
        return [records[item.id] for item in batch]

    def _generate(self, batch: list[Item], arrays: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
        gen = self.ctx.config.generation
        start = time.perf_counter()
        outputs: list[Any] = [None] * len(batch)
        evidence: list[Any] = [None] * len(batch)
        readers = self._readers()
        request = EvidenceRequest(layers=[], poolings=[])
        for stage in readers:  # one request for every reading stage
            request = stage.reads(request)
        in_decoding = parts_in_decoding(self.ctx)
        if in_decoding:  # the token parts ride on the same decoding (`tokens.DECODING_PARTS`)
            parts = token_spec(self.ctx)["parts"]
            request.top_k = self.ctx.config.tokens.top_k if "topk" in parts else 0
            request.prev_attention = "prev_attention" in parts
        for limit, positions in by_limit([max_new_tokens(self.ctx.config, item.instance) for item in batch]).items():
            prompts = [batch[p].prompt for p in positions]
            if readers or in_decoding:
                outs, found = self.ctx.backend.generate_with_evidence(
                    prompts, request, max_new_tokens=limit, batch_size=gen.batch_size, progress=self.item_done)
            else:
                outs, found = self.ctx.backend.generate(prompts, max_new_tokens=limit, batch_size=gen.batch_size,
                                                        progress=self.item_done), None
            for k, pos in enumerate(positions):
                outputs[pos], evidence[pos] = outs[k], found[k] if found else None
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        # the reader's seconds go to the reading stages' records (without one, they stay the decoding's)
        reading = [ev.seconds for ev in evidence if ev is not None] if readers else []
        charged = dict.fromkeys(name for s in reading for name in s)  # the stages the reader charged, in its order
        read_s = {stage: sum(s.get(stage, 0.0) for s in reading) / len(reading) for stage in charged}
        per_item -= sum(read_s.values()) * len(reading) / max(1, len(batch))  # the decoding's own share
        self._store_evidence(readers, batch, outputs, evidence, read_s)
        records: dict[str, dict[str, Any]] = {}
        for item, out in zip(batch, outputs, strict=True):
            if out.error:
                records[item.id] = {"id": item.id, "failed": out.error}
                continue
            record = Generation(id=item.id, prompt=item.prompt, response=out.text, token_ids=out.token_ids,
                                token_logprobs=out.token_logprobs, finish_reason=out.finish_reason,
                                n_tokens=out.n_tokens or 0, model=self.ctx.model, seconds=per_item,
                                token_text=(out.extra.get("tokens") or []) if "tokens" in out.extra else None,
                                **reasoning_fields(out, max_new_tokens(self.ctx.config, item.instance)))
            records[item.id] = {**record.model_dump(exclude={"skipped"}), **remote_usage([out])}
        ok = [item for item in batch if "failed" not in records[item.id]]
        if token_spec(self.ctx)["parts"] and ok:
            passes = {} if not in_decoding else {
                item.id: read for item, ev in zip(batch, evidence, strict=True)
                if ev is not None and (read := decoded_tokens(item.id, records[item.id], ev.output)) is not None}
            rest = [item for item in ok if item.id not in passes]  # evidence not read: the teacher-forced pass
            if rest:
                passes.update(run_token_pass(self.ctx, rest, {item.id: records[item.id]["token_ids"] for item in rest},
                                             prefixes={item.id: records[item.id]["reasoning_ids"] for item in rest}))
            for item in ok:
                rec = records[item.id]
                offsets = self.ctx.backend.token_offsets(rec["token_ids"], rec["response"])
                arrays[item.id] = {}
                rec["tokens"] = token_record(self.ctx, passes[item.id], offsets, arrays[item.id])
        return records

    def _readers(self) -> list[DecodingReader]:
        """The planned stages whose records the greedy decoding also reads (`evidence_in_decoding`, a backend that
        can, stages a selected detector reads): found by their declared interface, so this module imports none."""
        if not (self.ctx.config.evidence_in_decoding and self.ctx.signals and self.ctx.backend.fuses_evidence()):
            return []
        readers = [cls(self.ctx) for cls in plan(self.ctx.signals) if issubclass(cls, DecodingReader)]
        return [stage for stage in readers if stage.reads_in_decoding()]

    def _store_evidence(self, readers: list[DecodingReader], batch: list[Item], outputs: list[Any],
                        evidence: list[Any], seconds: dict[str, float]) -> None:
        """Store the features/auxiliary records read while decoding (items that have none yet; an answer that
        failed or whose evidence could not be read is left to its own stage); `seconds`: the reading's seconds per
        item and stage."""
        done = [(item, out, ev) for item, out, ev in zip(batch, outputs, evidence, strict=True)
                if ev is not None and not out.error]
        if not readers or not done:
            return
        items = [Item(instance=item.instance, prompt=item.prompt,
                      generation=Generation(id=item.id, prompt=item.prompt, response=out.text,
                                            token_ids=out.token_ids, token_logprobs=out.token_logprobs,
                                            finish_reason=out.finish_reason, n_tokens=out.n_tokens or 0,
                                            model=self.ctx.model))
                 for item, out, _ in done]
        evidence_of = {item.id: ev for item, (_, _, ev) in zip(items, done, strict=True)}
        for stage in readers:
            def decoded(part: list[Item], s: DecodingReader = stage) -> list[dict[str, Any]]:
                return s.from_decoding(part, [evidence_of[i.id] for i in part], seconds.get(s.name, 0.0))

            self._store_read(stage, items, decoded)

    def _given_readers(self) -> list[DecodingReader]:
        """The planned stages whose records the pass over given responses also yields (`reads_given`), when the
        backend reads them in that pass."""
        if not (self.ctx.signals and self.ctx.backend.reads_given()):
            return []
        return [cls(self.ctx) for cls in plan(self.ctx.signals)
                if issubclass(cls, DecodingReader) and cls.reads_given]

    def _given_markers(self) -> Markers | None:
        """The thinking markers a given response is split at: the `reasoning` section's (its `by_model` entry for this
        model), None under `split: off`. A given text has no chat template to read, so `auto` splits like `markers`:
        at a closing marker (an opening one at the start is optional)."""
        settings = reasoning_settings(self.ctx.config, self.ctx.model)
        if settings.get("split", "auto") == "off":
            return None
        return Markers(open=settings.get("open", "<think>"), close=settings.get("close", "</think>"))

    def _given_parts(self, batch: list[Item]) -> dict[str, GivenParts]:
        """The given responses of `batch` that hold a thinking block, split (`haldet.text.reasoning.split_given`).
        One whose units are labelled on the whole text is refused: their offsets would not index its answer."""
        markers = self._given_markers()
        if markers is None:
            return {}
        parts = {item.id: cut for item in batch if (cut := split_given(item.instance.response or "", markers))}
        labelled = [item.id for item in batch if item.id in parts and item.instance.units]
        if labelled:
            raise HaldetError(f"{len(labelled)} given response(s) hold a thinking block ({markers.open} ... "
                              f"{markers.close}) and carry unit labels on the whole text, e.g. {labelled[0]}",
                              where="the dataset's responses",
                              hint="give the units' offsets on the answer alone with the thinking block removed, "
                                   "or set reasoning.split: off to read the whole text as the answer")
        return parts

    def _teacher_force(self, batch: list[Item], arrays: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
        """Given responses: tokenised once with offsets, read by one teacher-forced pass that also yields the
        pooled states the reading stages (features) store. A response that holds a thinking block is stored like a
        generated reasoning output: its answer is read after its reasoning (`_given_reasoning`), and one without an
        answer (the block never closes) is read by no pass."""
        start = time.perf_counter()
        backend = self.ctx.backend
        window = context_window(backend)
        parts = self._given_parts(batch)
        answers = {item.id: parts[item.id].answer if item.id in parts else item.instance.response or ""
                   for item in batch}
        # an answer past the model's context is never tokenised whole (a megabyte would take gigabytes)
        too_long = {item.id: why for item in batch if window is not None
                    and (why := beyond_context(backend.encode_response, answers[item.id], window))}
        cut = {item_id for item_id, p in parts.items() if p.no_answer}
        encoded = {item.id: ([], []) if item.id in too_long or item.id in cut else backend.encode_response(
                   answers[item.id]) for item in batch}
        reasoning = self._given_reasoning(batch, parts, {i: len(e[0]) for i, e in encoded.items()})
        readers = self._given_readers()
        request = None
        for stage in readers:
            request = stage.reads(request or EvidenceRequest(layers=[], poolings=[]))
        runnable = [item for item in batch if item.id not in too_long and item.id not in cut]
        prefixes = {i: r["reasoning_ids"] for i, r in reasoning.items() if i not in cut}
        outs, found = run_given_pass(self.ctx, runnable, {i.id: encoded[i.id][0] for i in runnable},
                                     {i.id: encoded[i.id][1] for i in runnable}, request,
                                     prefixes=prefixes) if runnable else ({}, {})
        for item_id in cut:
            info: dict[str, Any] = {"policy": "skipped", "reason": parts[item_id].no_answer}
            outs[item_id] = TokenOutput(key=item_id, window=info)
            if found:
                found[item_id] = ForwardOutput(key=item_id, n_tokens=0, window=info)
        for item_id, why in too_long.items():
            info = {"policy": "skipped", "window": window, "reason": why}
            outs[item_id] = TokenOutput(key=item_id, window=info)
            if found:
                found[item_id] = ForwardOutput(key=item_id, n_tokens=0, window=info)
        per_item = (time.perf_counter() - start) / max(1, len(batch))
        records = {}
        for item in batch:
            out, (ids, offsets) = outs[item.id], encoded[item.id]
            logprobs = out.token_logprobs
            valid = logprobs is not None
            no_answer = item.id in cut
            record = Generation(id=item.id, prompt=item.prompt, response=answers[item.id],
                                token_ids=ids if valid else [],
                                token_logprobs=[float(x) for x in logprobs] if logprobs is not None else [],
                                finish_reason="provided" if valid or no_answer else "skipped",
                                n_tokens=len(ids) if valid else 0, model=self.ctx.model, seconds=per_item,
                                provided=True, skipped=None if valid or no_answer else (out.window or {}).get("reason"),
                                **reasoning.get(item.id, {}))
            arrays[item.id] = {}
            records[item.id] = {**record.model_dump(exclude={"skipped"} if valid or no_answer else None),
                                "tokens": token_record(self.ctx, out, offsets, arrays[item.id])}
        if found:
            items = [Item(instance=item.instance, prompt=item.prompt, generation=generation_of(records[item.id]))
                     for item in batch]
            for stage in readers:
                # the pass is the generate stage's (its seconds are charged there): the reading adds no time
                def given(part: list[Item], s: DecodingReader = stage) -> list[dict[str, Any]]:
                    return s.from_given(part, [found[i.id] for i in part], 0.0)

                self._store_read(stage, items, given)
        return records

    def _given_reasoning(self, batch: list[Item], parts: dict[str, GivenParts],
                         n_answer: dict[str, int]) -> dict[str, dict[str, Any]]:
        """The `Generation` reasoning fields of the split given responses, as a generated output has them: the ids of
        everything before the answer (each part tokenised on its own, so `reasoning_span` marks the thinking text's
        ids exactly), their log-probs from one pass over prompt + those ids, and the answer's token offsets."""
        backend = self.ctx.backend
        ids: dict[str, tuple[list[int], list[int]]] = {}
        for item_id, p in parts.items():
            before, trace = backend.encode_text(p.before) if p.before else [], backend.encode_text(p.trace)
            ids[item_id] = ([*before, *trace, *(backend.encode_text(p.between) if p.between else [])],
                            [len(before), len(before) + len(trace)])
        passed = backend.token_pass([TokenRequest(prompt_ids=backend.encode_prompt(item.prompt),
                                                  answer_ids=ids[item.id][0], key=item.id)
                                     for item in batch if item.id in parts and ids[item.id][0]],
                                    top_k=0, entropies=False, attention=False,
                                    batch_size=self.ctx.config.tokens.batch_size) if parts else []
        logprobs = {out.key: out.token_logprobs for out in passed}
        out: dict[str, dict[str, Any]] = {}
        for item_id, p in parts.items():
            prefix, span = ids[item_id]
            lps = logprobs.get(item_id)
            out[item_id] = {"reasoning": p.reasoning, "reasoning_ids": prefix, "reasoning_span": span,
                            "reasoning_logprobs": [] if lps is None else [float(x) for x in lps],
                            "answer_tokens": [len(prefix), len(prefix) + n_answer[item_id]],
                            "no_answer": p.no_answer}
        return out

    def _store_read(self, stage: DecodingReader, items: list[Item],
                    make: Callable[[list[Item]], list[dict[str, Any]]]) -> None:
        """Append `make(items lacking a record)`'s records to `stage`'s log, each under the stage's key."""
        with self.ctx.store.lock(stage.name):
            have = stage.records(items)
            part = [item for item in items if item.id not in have]
            if not part:
                return
            recs = make(part)
            keys = {item.id: stage.key(item) for item in part}
            for rec in recs:
                rec["key"] = keys[rec["id"]]
            self.ctx.store.log(stage.name).append(recs)


def context_window(backend: Any) -> int | None:
    """The model's context in tokens; None where the backend does not say (nothing is bounded then)."""
    try:
        return int(backend.window())
    except HaldetError:
        return None


def reasoning_fields(out: Any, limit: int) -> dict[str, Any]:
    """A reasoning model's split of one output (`GenOutput.extra`, set by the backend) as `Generation` fields; an
    output cut off inside its reasoning says at which limit (`generation.max_new_tokens`)."""
    extra = out.extra
    if "reasoning" not in extra:
        return {}
    no_answer = extra.get("no_answer")
    if no_answer is not None and out.finish_reason == "length":
        no_answer = no_answer_reason("length", limit)
    return {"reasoning": extra["reasoning"], "reasoning_ids": list(extra.get("reasoning_ids") or []),
            "reasoning_logprobs": list(extra.get("reasoning_logprobs") or []),
            "reasoning_span": extra.get("reasoning_span"), "answer_tokens": extra.get("answer_tokens"),
            "no_answer": no_answer}


def remote_usage(outs: list[Any]) -> dict[str, Any]:
    """Tokens billed and cost of a remote backend's outputs for one record ({} for local backends), and why their
    log-probs were unusable when they were asked for and came back empty, truncated or malformed."""
    if not outs or "prompt_tokens" not in outs[0].extra:
        return {}
    costs = [o.extra.get("cost_usd") for o in outs]
    spoilt = [o.extra["logprobs_error"] for o in outs if o.extra.get("logprobs_error")]  # asked for, unusable
    return {"api_prompt_tokens": sum(o.extra["prompt_tokens"] for o in outs),
            "api_completion_tokens": sum(o.extra["completion_tokens"] for o in outs),
            "cost_usd": None if any(c is None for c in costs) else sum(costs),
            **({"logprobs_error": spoilt[0]} if spoilt else {})}


def generation_of(record: dict[str, Any]) -> Generation:
    """The `Generation` in a generate record (its cache key, billing and token-pass fields dropped)."""
    return Generation.model_validate({k: v for k, v in record.items() if k in Generation.model_fields})


def attach_generations(items: list[Item], records: dict[str, dict[str, Any]]) -> None:
    for item in items:
        item.generation = generation_of(records[item.id])


def decoded_tokens(key: str, record: dict[str, Any], found: ForwardOutput) -> TokenOutput | None:
    """The token pass's output of a generated answer from the evidence its decoding read (None when that evidence
    does not cover the answer's tokens, or the answer came after reasoning: then the pass runs)."""
    if "failed" in record or record.get("reasoning_ids"):
        return None
    n = len(record["token_ids"])
    if n == 0:
        return TokenOutput(key=key, token_logprobs=np.zeros(0))
    if found.token_entropies is None or len(found.token_entropies) != n:
        return None
    return TokenOutput(key=key, token_logprobs=np.asarray(record["token_logprobs"], dtype=np.float64),
                       entropies=found.token_entropies, topk_ids=found.topk_ids, topk_logprobs=found.topk_logprobs,
                       attn_prev=found.attn_prev)
