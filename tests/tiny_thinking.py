"""A tiny local reasoning model, built in milliseconds without downloads: a Llama whose greedy next token depends on
the current token alone (one-hot embeddings, a transition table in the output head, feed-forward outputs zeroed,
small attention outputs, so its log-probs and states still depend on the context), with `<think>` / `</think>` as
added tokens and a chat template that opens the thinking block at the end of the prompt unless `enable_thinking` is
false (as Qwen3's and DeepSeek-R1's templates do). Its greedy output is always
`the capital of australia is sydney </think> canberra .` then EOS: reasoning, closing marker, answer."""

from __future__ import annotations

from pathlib import Path

WORDS = ["[UNK]", "[PAD]", "</s>", "<think>", "</think>", "user", "assistant", ":", "the", "capital", "of",
         "australia", "is", "sydney", "canberra", ".", "what", "?", "question", "answer", "paris", "Yes", "No",
         "context", "a", "city", "large", "true", "false", "correct"]
# current token -> next greedy token (every other token: ".")
CHAIN = {"<think>": "the", "the": "capital", "capital": "of", "of": "australia", "australia": "is", "is": "sydney",
         "sydney": "</think>", "</think>": "canberra", "canberra": ".", ".": "</s>", ":": "<think>"}
TEMPLATE = (
    "{% for m in messages %}{{ m.role }} : {{ m.content }} {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% if enable_thinking is defined and not enable_thinking %}"
    " <think> </think>{% else %} <think>{% endif %}{% endif %}"
)
CONTEXT = 0.05  # weight scale of the attention output: how much the next token's logits depend on the context
MARGIN = 9.0  # logit of the chain's next token over every other, less 0-3 by token (log-probs differ)


def build_tiny_thinking(path: Path) -> Path:
    import torch
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_tokens([AddedToken("<think>", special=False), AddedToken("</think>", special=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(path)
    n = len(WORDS)
    config = LlamaConfig(vocab_size=n, hidden_size=n + 2, intermediate_size=8, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=(n + 2) // 2,
                         max_position_embeddings=512, eos_token_id=vocab["</s>"], pad_token_id=vocab["[PAD]"],
                         bos_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        torch.manual_seed(0)
        for layer in model.model.layers:  # attention adds a little of the context (the chain's argmax holds)
            layer.self_attn.o_proj.weight.normal_(0.0, CONTEXT)
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for word, i in vocab.items():
            model.model.embed_tokens.weight[i, i] = 1.0
            nxt = vocab[CHAIN.get(word, ".")]
            # after the final RMS norm the one-hot state is sqrt(hidden) * e_i
            model.lm_head.weight[nxt, i] = (MARGIN - i % 4) / (config.hidden_size ** 0.5)
    model.generation_config.eos_token_id = vocab["</s>"]
    model.save_pretrained(path)
    return path
