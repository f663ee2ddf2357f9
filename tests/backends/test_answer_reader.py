"""Evidence read while decoding (`haldet.backends.hf.answer_reader`) equals what a teacher-forced pass over prompt +
answer gives, and the greedy answers are the plain decoder's; the generate stage stores the features and auxiliary
records from it. Real runs of the embedded SmolLM2-135M."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from haldet.backends.base import EvidenceRequest, FollowUp, ForwardRequest
from haldet.backends.hf import answer_reader
from haldet.backends.hf.backend import HFBackend
from haldet.config import RunConfig
from haldet.schema import Instance
from haldet.signals import Signal
from haldet.stages.auxiliary import SELF_EVAL_INSTRUCTION, VERBALIZED_INSTRUCTION, AuxiliaryStage, answer_candidates
from haldet.stages.base import CellContext, Item
from haldet.stages.features import STATEMENTS, FeatureStage
from haldet.stages.generate import GenerateStage, attach_generations
from haldet.store import CellStore
from haldet.text.confidence import confidence_complete

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "Name a prime number larger than 10.",
             "What colour is the sky on a clear day?", "Answer with one word: is water wet?",
             "How many legs does a spider have?", "Reply with the single word OK."]
POOLINGS = ["mean", "last", "tbg", "slt", "first:3", "last:3"]


@pytest.fixture(scope="module")
def backend() -> HFBackend:
    return HFBackend("smollm2-135m", device="cpu", decode_rows=3)  # a small pool: rows join and leave it


@pytest.fixture(scope="module")
def prompts(backend: HFBackend) -> list[str]:
    return [backend.render_chat([{"role": "user", "content": q}]) for q in QUESTIONS]


def _request(backend: HFBackend) -> EvidenceRequest:
    true_ids, false_ids = answer_candidates(backend)
    follow_ups = {
        "verbalized": FollowUp(tail=backend.encode_text(backend.turn_suffix(VERBALIZED_INSTRUCTION)), max_new_tokens=6,
                               until=confidence_complete),
        "self_eval": FollowUp(tail=backend.encode_text(backend.turn_suffix(SELF_EVAL_INSTRUCTION)), max_new_tokens=1,
                              candidates=true_ids + false_ids)}
    return EvidenceRequest(layers=list(range(backend.layer_count() + 1)), poolings=POOLINGS, icr=True,
                           statements={name: backend.encode_text(text) for name, text in STATEMENTS.items()},
                           follow_ups=follow_ups)


def _teacher_forced(backend: HFBackend, prompts: list[str], answers: list, statements: dict) -> list:
    requests = [ForwardRequest(ids=backend.encode_prompt(p) + a.token_ids, start=len(backend.encode_prompt(p)),
                               key=str(i), branches=statements)
                for i, (p, a) in enumerate(zip(prompts, answers, strict=True))]
    return backend.forward(requests, layers=None, poolings=POOLINGS, logprobs=True, icr=True, batch_size=4)


def _largest_gaps(evidence: list, outs: list) -> dict[str, float]:
    gaps: dict[str, float] = {}
    for ev, out in zip(evidence, outs, strict=True):
        mine = ev.output
        pairs = [*((f"pooled {k}", mine.pooled[k], out.pooled[k]) for k in out.pooled),
                 *((f"statement {k}", mine.branch_states[k], out.branch_states[k]) for k in out.branch_states),
                 ("icr", mine.icr, out.icr), ("entropies", mine.token_entropies, out.token_entropies),
                 ("chernoff", mine.token_chernoff, out.token_chernoff)]
        for name, a, b in pairs:
            if b is not None:
                gaps[name] = max(gaps.get(name, 0.0), float(np.abs(np.asarray(a) - np.asarray(b)).max()))
    return gaps


def test_evidence_read_while_decoding_equals_a_teacher_forced_pass(backend, prompts):
    request = _request(backend)
    plain = backend.generate(prompts, max_new_tokens=8, batch_size=2)
    answers, evidence = backend.generate_with_evidence(prompts, request, max_new_tokens=8, batch_size=2)
    assert [a.token_ids for a in answers] == [p.token_ids for p in plain]  # the reader never changes an answer
    assert {a.finish_reason for a in answers} == {"stop", "length"}  # both endings (limit-cut rows flush)
    outs = _teacher_forced(backend, prompts, answers, request.statements)
    gaps = _largest_gaps(evidence, outs)
    assert set(gaps) == {*(f"pooled {k}" for k in POOLINGS), *(f"statement {k}" for k in STATEMENTS), "icr",
                         "entropies", "chernoff"}
    assert max(gaps.values()) < 2e-3, gaps
    for ev, answer in zip(evidence, answers, strict=True):
        np.testing.assert_array_equal(ev.output.token_logprobs, answer.token_logprobs)


def test_an_ended_rows_later_columns_are_masked_when_its_cache_is_continued(backend, prompts, monkeypatch):
    """Negative control of the test above: an ended row stays in the pool while others decode, and those steps
    write cache columns it must never read. A fork that forgets this gives statements unlike the pass."""
    monkeypatch.setattr(backend, "decode_rows", 8)  # one pool: ended rows wait there while the others decode
    request = _request(backend)
    request.follow_ups = {}
    answers, evidence = backend.generate_with_evidence(prompts, request, max_new_tokens=8, batch_size=2)
    good = _largest_gaps(evidence, _teacher_forced(backend, prompts, answers, request.statements))
    real_fork = answer_reader.fork

    def careless_fork(pool, index, room):
        pool.width[index] = pool.mask.shape[1]  # as if every column were the row's own
        return real_fork(pool, index, room)

    monkeypatch.setattr(answer_reader, "fork", careless_fork)
    _, broken = backend.generate_with_evidence(prompts, request, max_new_tokens=8, batch_size=2)
    bad = _largest_gaps(broken, _teacher_forced(backend, prompts, answers, request.statements))
    assert good["statement ccs_pos"] < 2e-3 < bad["statement ccs_pos"]


def test_follow_ups_equal_asking_them_as_prompts(backend, prompts):
    request = _request(backend)
    answers, evidence = backend.generate_with_evidence(prompts, request, max_new_tokens=8, batch_size=2)
    verbalized = backend.generate_until([backend.follow_up(p, a.text, VERBALIZED_INSTRUCTION)
                                         for p, a in zip(prompts, answers, strict=True)], confidence_complete,
                                        max_new_tokens=6, batch_size=4)
    true_ids, false_ids = answer_candidates(backend)
    verdicts = backend.candidate_logprobs([backend.follow_up(p, a.text, SELF_EVAL_INSTRUCTION)
                                           for p, a in zip(prompts, answers, strict=True)], true_ids + false_ids,
                                          max_new_tokens=1, batch_size=4)
    for ev, asked, verdict in zip(evidence, verbalized, verdicts, strict=True):
        reply = backend.reply_output(ev.replies["verbalized"], confidence_complete)
        assert (reply.text, reply.finish_reason) == (asked.text, asked.finish_reason)
        np.testing.assert_allclose(ev.replies["self_eval"].candidate_logprobs,
                                   verdict.extra["candidate_logprobs"], atol=2e-3)
        assert backend.reply_output(ev.replies["self_eval"]).text == verdict.text


def test_replies_ride_in_the_answers_steps(backend, prompts, monkeypatch):
    """Replies made while answers are still decoded ride in the answers' pool (`boarding`, `rode`): decoded in the
    answers' own steps, the same replies as when every reply waits for a pool of its own after the answers, in no
    more forward calls (and without holding every reply's cache until the answers end). Negative control: with
    `boarding` handing nothing over, no reply rides."""
    request = _request(backend)
    calls: list[int] = []
    hook = backend.model.register_forward_pre_hook(lambda *_: calls.append(1))
    in_own_pool = [False]
    rode_beside_answers: list[int] = []
    real_rode, real_alone = answer_reader.AnswerReader.rode, answer_reader.AnswerReader._decode_waiting

    def counted(self, ids, logits):
        if not in_own_pool[0]:
            rode_beside_answers.extend(ids.tolist())
        return real_rode(self, ids, logits)

    def alone(self):
        in_own_pool[0] = True
        try:
            real_alone(self)
        finally:
            in_own_pool[0] = False

    def replies_of(evidence):
        return [(ev.replies["verbalized"].tokens, ev.replies["self_eval"].tokens) for ev in evidence]

    monkeypatch.setattr(answer_reader.AnswerReader, "rode", counted)
    monkeypatch.setattr(answer_reader.AnswerReader, "_decode_waiting", alone)
    try:
        _, riding = backend.generate_with_evidence(prompts, request, max_new_tokens=8, batch_size=2)
        with_riders, ridden = len(calls), set(rode_beside_answers)
        calls.clear()
        monkeypatch.setattr(answer_reader.AnswerReader, "boarding", lambda self: [])
        _, waited = backend.generate_with_evidence(prompts, request, max_new_tokens=8, batch_size=2)
    finally:
        hook.remove()
    assert replies_of(riding) == replies_of(waited)
    assert len(ridden) >= 3 and all(rid < 0 for rid in ridden)  # the reader's rows, never an answer's
    assert with_riders <= len(calls), (with_riders, len(calls))


def _cell(tmp_path: Path, backend: HFBackend, fused: bool) -> CellContext:
    config = RunConfig.model_validate({"generation": {"max_new_tokens": 6}, "auxiliary": {"max_new_tokens": 6},
                                       "evidence_in_decoding": fused})
    signals = frozenset({Signal.HIDDEN_MEAN, Signal.ICR_FEATURES, Signal.CCS_FEATURES, Signal.TOKEN_ENTROPIES,
                         Signal.VERBALIZED, Signal.SELF_EVAL})
    return CellContext(config=config, dataset="toy", model="smollm2-135m", store=CellStore(tmp_path),
                       backend_factory=lambda: backend, signals=signals)


def test_generate_stage_stores_evidence_records_equal_to_the_stages_own(tmp_path, backend, prompts):
    items = [Item(instance=Instance(id=f"toy/test/{i}", dataset="toy", scenario="qa_open", task_type="short_answer",
                                    question=q, references=["x"]), prompt=p)
             for i, (q, p) in enumerate(zip(QUESTIONS[:4], prompts[:4], strict=True))]
    records = {}
    for fused in (True, False):
        ctx = _cell(tmp_path / str(fused), backend, fused)
        shown: dict[str, list[int]] = {}
        ctx.progress = lambda description, total, shown=shown: shown.setdefault(description.split()[0], []).append
        gen = GenerateStage(ctx).ensure(items)
        # the four items are one batch (the decoding pool's), yet the progress bar moves as each answer ends
        assert shown["generate"] == [1] * len(items)
        attach_generations(items, gen)
        found = {stage.name: stage.records(items) for stage in (FeatureStage(ctx), AuxiliaryStage(ctx))}
        # fused: the generate stage already stored both; the stages then compute nothing
        assert all(len(recs) == (len(items) if fused else 0) for recs in found.values())
        records[fused] = {stage.name: stage.ensure(items) for stage in (FeatureStage(ctx), AuxiliaryStage(ctx))}
        assert ctx.counts["features_computed"] == ctx.counts["auxiliary_computed"] == (0 if fused else len(items))
    same_text = 0
    for item in items:
        fused_aux, own_aux = records[True]["auxiliary"][item.id], records[False]["auxiliary"][item.id]
        assert (fused_aux["source"], own_aux["source"]) == ("decoding", "prompt") and fused_aux["key"] == own_aux["key"]
        # the prompt path re-reads the answer's text (stripped); decoding continues its exact ids: the two readings
        # are equal where that text gives back the same ids
        ids = backend.encode_prompt(item.prompt + item.generation.response)[len(backend.encode_prompt(item.prompt)):]
        if ids == item.generation.token_ids:
            same_text += 1
            assert fused_aux["verbalized"] == own_aux["verbalized"]
            assert abs(fused_aux["p_true"] - own_aux["p_true"]) < 2e-3
        fused_f, own_f = records[True]["features"][item.id], records[False]["features"][item.id]
        assert (fused_f["source"], own_f["source"]) == ("decoding", "forward") and fused_f["key"] == own_f["key"]
        np.testing.assert_allclose(fused_f["token_entropies"], own_f["token_entropies"], atol=1e-3)
        assert fused_f["seconds"] > 0 and fused_aux["seconds"] > 0  # the reading's own work is charged to them
        assert fused_aux["self_eval_n_tokens"] == 1 and 1 <= fused_aux["verbalized_n_tokens"] <= 6  # cost counts
    assert same_text >= 2
    log = (tmp_path / "True" / "features.jsonl").read_text().splitlines()
    assert len(log) == len(items) and all(json.loads(line)["arrays"] for line in log)


def test_an_answer_ended_by_its_first_token_still_gets_its_branches(backend, prompts, monkeypatch):
    """A row whose first token is a stop token ends when its prompt is read, before it ever joins the pool: it is
    still read (statements after the prompt, follow-ups), as a teacher-forced pass with an empty answer span is."""
    first = backend.generate(prompts, max_new_tokens=1, batch_size=4)
    monkeypatch.setattr(backend, "stop_ids", backend.stop_ids | {first[0].token_ids[0]})
    request = _request(backend)
    answers, evidence = backend.generate_with_evidence(prompts, request, max_new_tokens=4, batch_size=2)
    empty = [i for i, a in enumerate(answers) if not a.token_ids]
    assert 0 < len(empty) < len(prompts)
    outs = _teacher_forced(backend, prompts, answers, request.statements)
    for i in empty:
        mine = evidence[i]
        assert mine.output.pooled == {} and mine.output.icr is None and set(mine.replies) == {"verbalized", "self_eval"}
        for name, state in outs[i].branch_states.items():
            assert np.abs(mine.output.branch_states[name] - state).max() < 2e-3


def test_branches_sharing_a_prefix_are_packed_as_one_token_tree():
    tokens, depth, sees, ends, users = answer_reader.token_tree([[1, 2, 3], [1, 2, 4], [5, 2]])
    assert tokens == [1, 2, 3, 4, 5, 2]  # the shared [1, 2] once
    assert depth == [0, 1, 2, 2, 0, 1]
    assert ends == [2, 3, 5]
    assert users == [{0, 1}, {0, 1}, {0}, {1}, {2}, {2}]
    seen = [set(np.flatnonzero(row.numpy())) for row in sees]
    assert seen == [{0}, {0, 1}, {0, 1, 2}, {0, 1, 3}, {4}, {4, 5}]  # ancestors and itself, never a sibling
    with pytest.raises(ValueError, match="no tokens"):
        answer_reader.token_tree([[1], []])
