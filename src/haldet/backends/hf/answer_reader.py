"""Evidence of each greedy answer read while it is decoded: the features and auxiliary stages' inputs without
reading prompt + answer a second time.

A teacher-forced pass over prompt + answer (`HFBackend.forward`) recomputes the states the decoding steps already
computed. `AnswerReader` keeps them instead (`decode(reader=...)`): every layer's state of each prompt token
(from the prefill: the SEP token-before-generation state, the ICR context) and of each answer token (from its
step: mean/last/second-to-last pooling, ICR), the entropy of each choosing distribution, and, for ICR, each
answer token's head-averaged attention row (`reading_attention`: the SDPA kernel still computes the output, so
answers are unchanged). Two parts of the token pass ride along too, when asked: each answer token's top-k
log-probs (from the step's own logits) and, per layer and head, the attention of the query that chooses a token on
its own position (RAUQ's a_{t,t-1}; the step's query reads its own key in the last cache column).
When a row ends, its cache (prompt + answer, as decoded) is copied once (`pool.fork`)
and, once 16 ended rows have gathered (`BRANCH_ROWS`), continued by branches in one packed pass over them all: the
CCS/PRISM statements (their last token's states) and the follow-up questions of the answered conversation
(verbalized confidence, self-evaluation: first reply position's log-probs, then a greedy reply while it is
wanted). The replies ride in the answers' own pool (`boarding`: rows with negative ids, decoded in its steps, which
cost about the same with a few rows more); those made after the answers have all ended are decoded together in one
pool of their own (`flush`). A row cut by the token limit feeds its last token once more
first (`decode`'s flush), so its cache and states hold the whole answer, as a teacher-forced pass would.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from haldet.backends.base import AnswerEvidence, EvidenceRequest, FollowUp, ForwardOutput, Reply, pooling_window
from haldet.backends.hf.distribution import chernoff_terms
from haldet.backends.hf.kv_cache import cache_arg, copy_rows
from haldet.backends.hf.pool import Pool, Prefilled, fork, joined, merge
from haldet.backends.hf.states import icr_features
from haldet.backends.hf.tokens import topk_with_observed
from haldet.signals import CHERNOFF_WIDTH

READ_ATTENTION = "haldet_sdpa_reading"  # attention implementation name: SDPA output, attention rows on the side
_ROWS: list[torch.Tensor] | None = None  # while a step's attention rows are read: one [R, kv] per layer
_SELF: list[torch.Tensor] | None = None  # while a step's own-position attention is read: one [R, heads] per layer
BRANCH_ROWS = 16  # ended rows whose branches are read in one pass (fewer only when the replies' pool is smaller)


def _read_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    """SDPA attention (the output the model uses); while `_ROWS` is set, also the head-averaged attention
    probabilities of the last query position over every key column ([batch, kv], float32); while `_SELF` is set,
    each head's probability on the last key column, the query's own position in a decoding step ([batch, heads])."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    out = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if _ROWS is not None or _SELF is not None:
        batch, heads, _, dim = query.shape
        kv_heads, columns = key.shape[1], key.shape[2]
        # [batch, kv heads, query heads per kv head, dim] @ [batch, kv heads, dim, columns]: no repeated keys
        grouped = query[:, :, -1].float().reshape(batch, kv_heads, heads // kv_heads, dim) * kwargs.get("scaling", 1.0)
        scores = grouped @ key.float().transpose(2, 3)
        if attention_mask is not None:
            mask = attention_mask[:, :, -1:, :columns]  # [batch, 1, 1, columns]
            if mask.dtype == torch.bool:
                scores.masked_fill_(~mask, float("-inf"))
            else:
                scores += mask
        probs = torch.softmax(scores, dim=-1)  # [batch, kv heads, query heads per kv head, columns]
        if _ROWS is not None:
            _ROWS.append(probs.mean(dim=(1, 2)))
        if _SELF is not None:  # query head h reads kv head h // (heads // kv_heads): the grouping above, in order
            _SELF.append(probs[..., -1].reshape(batch, heads))
    return out


@functools.cache
def _register() -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(READ_ATTENTION, _read_attention)
    AttentionMaskInterface.register(READ_ATTENTION, sdpa_mask)
    return READ_ATTENTION


@contextlib.contextmanager
def reading_attention(model: Any) -> Iterator[None]:
    """The model uses `_read_attention` inside the block (SDPA with the same masks, so the same outputs)."""
    before = model.config._attn_implementation
    model.set_attn_implementation(_register())
    try:
        yield
    finally:
        model.set_attn_implementation(before)


@contextlib.contextmanager
def _collect(rows: list[torch.Tensor] | None, own: list[torch.Tensor] | None) -> Iterator[None]:
    global _ROWS, _SELF
    _ROWS, _SELF = rows, own
    try:
        yield
    finally:
        _ROWS, _SELF = None, None


def token_tree(branches: Sequence[Sequence[int]]) -> tuple[list[int], list[int], torch.Tensor, list[int],
                                                               list[set[int]]]:
    """Token sequences packed as one prefix tree: its tokens (each shared prefix once, parents before children),
    each one's depth, which tokens each sees ([q, q] bool: its ancestors and itself), the index of each branch's
    last token, and which branches read each token."""
    tokens: list[int] = []
    depth: list[int] = []
    parent: list[int] = []
    users: list[set[int]] = []
    children: dict[tuple[int, int], int] = {}  # (parent node or -1, token) -> node
    ends = []
    for b, branch in enumerate(branches):
        if not branch:
            raise ValueError(f"branch {b} has no tokens: a statement or question must continue the answer")
        node = -1
        for d, token in enumerate(branch):
            if (node, token) not in children:
                children[node, token] = len(tokens)
                tokens.append(token)
                depth.append(d)
                parent.append(node)
                users.append(set())
            node = children[node, token]
            users[node].add(b)
        ends.append(node)
    sees = torch.eye(len(tokens), dtype=torch.bool)
    for node, up in enumerate(parent):  # parents come first: a node sees what its parent sees
        if up >= 0:
            sees[node] |= sees[up]
    return tokens, depth, sees, ends, users


class AnswerReader:
    """`decode.Reader` for greedy answers: keeps what `EvidenceRequest` asks, per row, and finishes each row's
    `AnswerEvidence` when it ends (`evidence[row]`). `head(last_hidden)` maps final states to logits, `text(ids)`
    decodes a reply for its follow-up's `until`."""

    def __init__(self, model: Any, request: EvidenceRequest, *, stop_ids: Sequence[int],
                 head: Callable[[torch.Tensor], torch.Tensor], text: Callable[[Sequence[int]], str],
                 pool_rows: int = 64) -> None:
        self.model, self.request, self.head, self.text = model, request, head, text
        self.stops = frozenset(stop_ids)
        # states kept per token: every layer for ICR (its context is every layer), else the requested ones
        self.kept = None if request.icr else request.layers
        self.states = request.icr or bool(request.layers)  # any hidden state to keep at all
        self.prompt: dict[int, torch.Tensor] = {}  # row -> [S, layers, D] (ICR) or [1, layers, D] (last only)
        self.answer: dict[int, list[torch.Tensor]] = {}  # row -> per answer token [layers, D]
        self.attention: dict[int, list[torch.Tensor]] = {}  # row -> per answer token [L, its read columns]
        self.entropies: dict[int, list[float]] = {}
        self.chernoff: dict[int, list[list[float]]] = {}  # row -> per answer token, `Signal.TOKEN_CHERNOFF`'s row
        self.topk: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # row -> per answer token (ids, log-probs)
        self.own: dict[int, list[torch.Tensor]] = {}  # row -> per token fed, [L, heads] attention on its own position
        self.evidence: dict[int, AnswerEvidence] = {}
        # the branches, packed as one token tree (a prefix they share is read once): its tokens, each one's depth
        # below the answer, which tokens each sees (its ancestors and itself), each branch's last token
        branches = [*request.statements.values(), *(f.tail for f in request.follow_ups.values())]
        self.tails, depth, self.sees, ends, users = token_tree(branches)
        self.depth = torch.tensor(depth, dtype=torch.long)
        self.ends = torch.tensor(ends, dtype=torch.long)
        self._rows: list[torch.Tensor] = []  # the current step's attention rows (ICR)
        self._own: list[torch.Tensor] = []  # the current step's own-position attention (`prev_attention`)
        self.room = len(self.tails) + max((f.max_new_tokens for f in request.follow_ups.values()), default=0)
        self.prompt_tokens: dict[int, int] = {}
        self.pool_rows = pool_rows  # the answers' pool rows: at most as many ended rows wait for their branches
        # every reply still being decoded, with its follow-up; a reply's row id in a pool is -1 - its index here
        # (answers' rows are >= 0), so reply rows can ride in the answers' own pool (`boarding`, `rode`)
        self.replying: list[tuple[FollowUp, Reply]] = []
        self.waiting: list[Pool] = []  # replies' pool parts not yet decoded
        # ended rows whose branches are still to be read: (forked cache, rows, their replies, their branch states)
        self.forked: list[tuple[Prefilled, list[int], dict[int, dict[str, Reply]],
                                dict[int, dict[str, np.ndarray]]]] = []
        # the branches' shared work (cache copy, packed pass) is charged by token count; a token both kinds of
        # branch read counts half to each
        statements = len(request.statements)
        self.statement_share = sum(
            sum(b < statements for b in u) / len(u) for u in users) / max(1, len(self.tails))
        # the reader's own work, charged to the stages whose records it makes (what rides inside the decoding
        # steps, the attention rows for ICR, stays in the decoding's time)
        self.seconds = {"features": 0.0, "auxiliary": 0.0}

    @contextlib.contextmanager
    def _timed(self, part: str, share: float = 1.0) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds[part] += elapsed * share
            if share < 1.0:
                self.seconds["auxiliary" if part == "features" else "features"] += elapsed * (1.0 - share)

    def _layers(self, states: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return list(states) if self.kept is None else [states[i] for i in self.kept]

    # --- decode.Reader ------------------------------------------------------------------------------------------
    def admitted(self, rows: torch.Tensor, state: Prefilled) -> None:
        with self._timed("features"):
            self._admitted(rows, state)

    def _admitted(self, rows: torch.Tensor, state: Prefilled) -> None:
        for row, n in zip(rows.tolist(), state.mask.sum(dim=-1).tolist(), strict=True):
            self.prompt_tokens[row] = int(n)
            self.answer[row], self.attention[row], self.entropies[row], self.chernoff[row] = [], [], [], []
            self.topk[row], self.own[row] = [], []
            self.prompt[row] = torch.empty(0)
        if not self.states:
            return
        layers = self._layers(state.rest_states or ())
        if not self.request.icr:  # the last prompt token's states suffice (SEP's token before generation)
            last = torch.stack([h[:, -1] for h in layers], dim=1).float()  # [n, layers, D]
            for i, row in enumerate(rows.tolist()):
                self.prompt[row] = last[i][None]
        else:
            rest = torch.stack(layers, dim=2).float()  # [n, width, layers, D]: the rows' own tokens, left-padded
            own = state.mask[:, -rest.shape[1]:].bool()
            head = (torch.stack(self._layers(state.head_states), dim=2)[0].float() if state.head_states
                    else rest.new_zeros((0, *rest.shape[2:])))
            for i, row in enumerate(rows.tolist()):
                self.prompt[row] = torch.cat([head, rest[i][own[i]]])

    def chose(self, rows: torch.Tensor, logits: torch.Tensor) -> None:
        with self._timed("features"):
            logp = torch.log_softmax(logits, dim=-1)
            entropy = -(logp.exp() * logp).nan_to_num().sum(-1)
            chernoff = chernoff_terms(logp)
            if self.request.top_k:  # greedy: the observed token is the argmax of the logits
                k_ids, k_lp = topk_with_observed(logp, logits.argmax(dim=-1), min(self.request.top_k, logp.shape[-1]))
                for i, row in enumerate(rows.tolist()):
                    self.topk[row].append((k_ids[i], k_lp[i]))
        for row, value, terms in zip(rows.tolist(), entropy.tolist(), chernoff.tolist(), strict=True):
            self.entropies[row].append(value)
            self.chernoff[row].append(terms)

    def stepping(self) -> contextlib.AbstractContextManager[Any]:
        self._rows, self._own = [], []
        if not (self.request.icr or self.request.prev_attention):
            return contextlib.nullcontext()
        return _collect(self._rows if self.request.icr else None, self._own if self.request.prev_attention else None)

    def stepped(self, pool: Pool, fed: torch.Tensor, states: tuple[torch.Tensor, ...]) -> None:
        with self._timed("features"):
            self._stepped(pool, fed, states)

    def _stepped(self, pool: Pool, fed: torch.Tensor, states: tuple[torch.Tensor, ...]) -> None:
        if self.request.prev_attention:
            own = torch.stack(self._own, dim=1)  # [R, L, heads]
            for i, row in zip(fed.tolist(), pool.rows[fed].tolist(), strict=True):
                self.own[row].append(own[i])
        if not self.states:
            for row in pool.rows[fed].tolist():
                self.answer[row].append(torch.empty(0))  # the answer's length is still counted
            return
        step = torch.stack([h[:, -1] for h in self._layers(states)], dim=1).float()  # [R, layers, D]
        attention = torch.stack(self._rows, dim=1) if self.request.icr else None  # [R, L, kv]
        for i, row in zip(fed.tolist(), pool.rows[fed].tolist(), strict=True):
            self.answer[row].append(step[i])
            if attention is not None:
                self.attention[row].append(attention[i][:, pool.mask[i].bool()])

    def ended(self, pool: Pool, index: torch.Tensor) -> None:
        rows = pool.rows[index].tolist()
        replies: dict[int, dict[str, Reply]] = {row: {} for row in rows}
        branch_states: dict[int, dict[str, np.ndarray]] = {row: {} for row in rows}
        if self.tails:  # the rows' caches wait for their branches' pass, filled in when it runs (`_run_branches`)
            with self._timed("features", share=self.statement_share):
                self.forked.append((fork(pool, index, self.room), rows, replies, branch_states))
            if sum(len(f[1]) for f in self.forked) >= min(BRANCH_ROWS, self.pool_rows):
                self._run_branches()
        with self._timed("features"):
            for row in rows:
                self.evidence[row] = AnswerEvidence(output=self._finish(row, branch_states[row]),
                                                    replies=replies[row])

    def finish_branches(self) -> None:
        """No answer will end any more (`decode`): read the branches still waiting now, so that their replies can
        ride with the replies still being decoded."""
        self._run_branches()

    def _run_branches(self) -> None:
        """The branches of every ended row still waiting, in one packed pass (rows rarely end together: a pass over
        a few rows' branches runs the matrix products at a fifth less throughput than one over 16 rows)."""
        waiting, self.forked = self.forked, []
        if not waiting:
            return
        rows = [row for _, part, _, _ in waiting for row in part]
        replies = {row: r for _, _, made, _ in waiting for row, r in made.items()}
        branch_states = {row: b for _, _, _, found in waiting for row, b in found.items()}
        with self._timed("features", share=self.statement_share):  # one cache of them all
            state = joined([w[0] for w in waiting], self.room)
        self._branches(state, rows, replies, branch_states)

    # --- a row's evidence ---------------------------------------------------------------------------------------
    def _finish(self, row: int, branch_states: dict[str, np.ndarray]) -> ForwardOutput:
        prompt, answer = self.prompt.pop(row), self.answer.pop(row)
        attention, entropies, chernoff = self.attention.pop(row), self.entropies.pop(row), self.chernoff.pop(row)
        topk, own = self.topk.pop(row), self.own.pop(row)
        out = ForwardOutput(key=str(row), n_tokens=self.prompt_tokens.pop(row) + len(answer),
                            branch_states=branch_states)
        if not answer:  # a stop token first: no answer span (only the branches)
            return out
        out.token_entropies = np.asarray(entropies[: len(answer)], dtype=np.float64)
        out.token_chernoff = np.asarray(chernoff[: len(answer)], dtype=np.float64).reshape(-1, CHERNOFF_WIDTH)
        if self.request.top_k:
            out.topk_ids = torch.stack([ids for ids, _ in topk[: len(answer)]]).cpu().numpy().astype(np.int64)
            out.topk_logprobs = torch.stack([lp for _, lp in topk[: len(answer)]]).float().cpu().numpy()
        if self.request.prev_attention:  # [L, heads, T]: token t's column from the step that fed token t - 1
            first = torch.full_like(own[0], float("nan")) if own else None  # the prompt's last query: not kept
            columns = [first, *own[: len(answer) - 1]] if first is not None else []
            out.attn_prev = (torch.stack(columns, dim=-1).cpu().numpy().astype(np.float32) if columns
                             else None)
        if not self.states:
            return out
        span = torch.stack(answer)  # [T, layers, D]
        asked = self.request.layers if self.kept is None else slice(None)  # every layer was kept for ICR
        picked, before = span[:, asked], prompt[-1, asked]
        pooled = {"mean": picked.mean(dim=0), "last": picked[-1], "slt": picked[max(0, len(answer) - 2)],
                  "tbg": before}  # as `states.pool_states`: second-to-last answer token, the token before the answer
        for name in self.request.poolings:
            window = pooling_window(name)  # first:N / last:N: the mean over the answer's first / last N tokens
            vec = pooled[name] if window is None else (
                picked[: window[1]] if window[0] == "first" else picked[-window[1]:]).mean(dim=0)
            out.pooled[name] = vec.cpu().numpy().astype(np.float32)
        if self.request.icr:
            hidden = torch.cat([prompt, span]).transpose(0, 1)  # [L + 1, S + T, D]
            end = hidden.shape[1]
            rows = torch.zeros((len(attention[0]), len(answer), end))  # [L, T, S + T]
            for t, a in enumerate(attention):
                rows[:, t, : a.shape[1]] = a
            out.icr = icr_features(list(hidden), list(rows), len(prompt), end)
        return out

    def _branches(self, state: Prefilled, rows: list[int], replies: dict[int, dict[str, Reply]],
                  branch_states: dict[int, dict[str, np.ndarray]]) -> None:
        """One packed pass over every row's statements and follow-up questions (each sees the answered
        conversation and itself only), then the follow-ups' greedy replies."""
        model, device = self.model, self.model.device
        n, q = len(rows), len(self.tails)
        ids = torch.tensor(self.tails, dtype=torch.long, device=device)[None].expand(n, q)
        positions = state.last_pos[:, None] + 1 + self.depth.to(device)[None]
        width = state.mask.shape[1]
        allowed = torch.cat([state.mask.bool()[:, None, :].expand(n, q, width),
                             self.sees.to(device)[None].expand(n, q, q)], dim=-1)
        dtype = model.dtype
        mask4d = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)
        names = list(self.request.statements)
        follow = list(self.request.follow_ups)
        ends = self.ends.to(device)
        with self._timed("features", share=self.statement_share):
            out = model(input_ids=ids, attention_mask=mask4d[:, None], position_ids=positions,
                        **cache_arg(model, state.cache), use_cache=True, output_hidden_states=True, logits_to_keep=1)
        if names:
            chosen = [out.hidden_states[i] for i in self.request.layers]
            at = torch.stack([h[:, ends[: len(names)]] for h in chosen], dim=2).float()  # [n, statements, L, D]
            for i, row in enumerate(rows):
                for k, name in enumerate(names):
                    branch_states[row][name] = at[i, k].cpu().numpy().astype(np.float32)
        if not follow:
            return
        with self._timed("auxiliary"):
            # the next-token logits after each follow-up's last question token
            first = self.head(out.hidden_states[-1][:, ends[len(names):]]).float()  # [n, follow-ups, V]
            started = [self._reply(state, rows, name, first[:, k], replies) for k, name in enumerate(follow)]
            going = [k for k, (_, _, live) in enumerate(started) if bool(live.any())]
            for k in going:  # the cache itself to the last follow-up whose replies go on, a copy to each other
                cache = (state.cache if k == going[-1]
                         else copy_rows(state.cache, None, state.cache.get_seq_length(), self.room))
                self._wait(state, rows, follow[k], cache, *started[k], self.sees[self.ends[len(names) + k]])

    def _reply(self, state: Prefilled, rows: list[int], name: str, logits: torch.Tensor,
               replies: dict[int, dict[str, Reply]]) -> tuple[list[Reply], torch.Tensor, torch.Tensor]:
        """Follow-up `name`'s reply in every row: its first token (greedy) and candidates' log-probs from `logits`;
        returns the replies, their first tokens and which of them go on (`_wait`)."""
        f = self.request.follow_ups[name]
        logp = torch.log_softmax(logits, dim=-1)
        candidates = logp[:, f.candidates].tolist() if f.candidates else [[] for _ in rows]
        first = logp.argmax(dim=-1)
        made = [Reply(tokens=[int(t)], logprobs=[float(logp[i, t])], candidate_logprobs=candidates[i])
                for i, t in enumerate(first.tolist())]
        for row, reply in zip(rows, made, strict=True):
            replies[row][name] = reply
        return made, first, torch.tensor([not self._ended(r.tokens, f) for r in made], device=state.mask.device)

    def _wait(self, state: Prefilled, rows: list[int], name: str, cache: Any, made: list[Reply],
              first: torch.Tensor, live: torch.Tensor, own: torch.Tensor) -> None:
        """Rows whose reply to follow-up `name` goes on wait, with `cache` (theirs alone: no other follow-up
        continues it), in which they see the answered conversation and this question only, to ride in the answers'
        pool (`boarding`) or, after it, to be decoded with every other waiting reply (`flush`)."""
        f = self.request.follow_ups[name]
        device = state.mask.device
        start = len(self.replying)
        self.replying.extend((f, reply) for reply in made)
        ids = -1 - torch.arange(start, start + len(rows), device=device)
        self.waiting.append(Pool(
            cache=cache, mask=torch.cat([state.mask, own.to(device)[None].expand(len(rows), -1).long()], dim=-1),
            last_pos=state.last_pos + len(f.tail), rows=ids, chosen=first, live=live,
            flush=torch.zeros_like(live), width=torch.full((len(rows),), -1, device=device)))

    def boarding(self) -> list[Pool]:
        """The replies' pool parts waiting to be decoded, handed over to ride in the answers' pool (their rows'
        ids are negative; `decode` gives each step's logits of them to `rode`)."""
        parts, self.waiting = self.waiting, []
        return parts

    def rode(self, ids: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Replies `ids` (negative row ids) chose their next token from `logits` [n, V] in a decoding step: the
        greedy tokens and which replies have ended. (Riding steps are the decoding's time, as the attention rows.)"""
        logp = torch.log_softmax(logits.float(), dim=-1)
        chosen = logp.argmax(dim=-1)
        picked = logp.gather(-1, chosen[:, None]).squeeze(-1).tolist()
        ended = []
        for rid, token, lp in zip(ids.tolist(), chosen.tolist(), picked, strict=True):
            f, reply = self.replying[-1 - rid]
            reply.tokens.append(int(token))
            reply.logprobs.append(float(lp))
            ended.append(self._ended(reply.tokens, f))
        return chosen, torch.tensor(ended, dtype=torch.bool, device=logits.device)

    def flush(self) -> None:
        """Read the branches and decode every reply still waiting (call once decoding has ended)."""
        self._run_branches()
        with self._timed("auxiliary"):
            self._decode_waiting()

    def _decode_waiting(self) -> None:
        """The waiting replies, decoded greedily together in one pool of their own until each has ended."""
        parts, self.waiting = self.waiting, []
        room = max((f.max_new_tokens for f in self.request.follow_ups.values()), default=0)
        pool = merge(parts, room=room)
        while pool is not None and bool(pool.live.any()):
            logits, _ = pool.step(self.model, False)
            index = pool.live.nonzero().flatten()
            chosen, ended = self.rode(pool.rows[index], logits[index])
            pool.chosen[index] = chosen
            pool.live[index[ended]] = False
            if 4 * int((~pool.live).sum()) >= int(pool.live.sum()):  # ended replies are a fifth: drop them
                pool = merge([pool], room=room)

    def _ended(self, tokens: list[int], f: FollowUp) -> bool:
        return (tokens[-1] in self.stops or len(tokens) >= f.max_new_tokens
                or (f.until is not None and f.until(self.text(tokens))))
