"""Tiny randomly initialised models saved to folders the loaders read like hub checkpoints: Llamas for the real
white-box code paths (attention, feed-forward, LoRA) and a MiniCheck-style classifier, each running in milliseconds."""

from __future__ import annotations

from pathlib import Path

WORDS = ["[UNK]", "[PAD]", "the", "capital", "is", "canberra", "sydney", "of", "australia", "context", ":",
         "question", "what", "?", ".", "user", "assistant", "city", "a", "large", "Yes", "No", "answer", "paris"]


def build_tiny_llama(path: Path, *, zero_mlp_layer: int | None = None, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                         initializer_range=0.5)
    model = LlamaForCausalLM(config)
    if zero_mlp_layer is not None:
        with torch.no_grad():
            model.model.layers[zero_mlp_layer].mlp.down_proj.weight.zero_()
    model.save_pretrained(path)
    return path


def build_tiny_llama_with_embedded_tokenizer(path: Path, *, seed: int = 0, layers: int = 2) -> Path:
    """A tiny randomly initialised Llama (GQA: 4 query heads over 2 key/value heads) carrying the embedded
    SmolLM2-135M's own tokenizer and chat template, saved with save_pretrained: prompts render and tokenise exactly
    as on the embedded model, while a pass costs milliseconds. Its window is the embedded model's (8192)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from haldet.backends.hf.loading import converted_gguf_dir
    from haldet.util.assets import MODEL_ALIASES

    tokenizer = AutoTokenizer.from_pretrained(converted_gguf_dir(MODEL_ALIASES["smollm2-135m"]()))
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


MNLI_LABELS = ("ENTAILMENT", "NEUTRAL", "CONTRADICTION")


def build_tiny_nli(path: Path, *, seed: int = 0, labels: tuple[str, ...] = MNLI_LABELS) -> Path:
    """A randomly initialised 2-layer BERT NLI classifier with MiniLM's tokenizer saved as a local checkpoint, its
    classes named `labels` in column order (a pair model reads the columns by these names)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from haldet.util.assets import resolve_embedding

    tok = AutoTokenizer.from_pretrained(resolve_embedding("minilm"))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, num_labels=len(labels), id2label=dict(enumerate(labels)),
                        label2id={name: i for i, name in enumerate(labels)})
    BertForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def build_tiny_checker(path: Path, *, seed: int = 5) -> Path:
    """A MiniCheck-style 2-way sequence classifier (randomly initialised, MiniLM's tokenizer) saved as a local
    checkpoint: `minicheck` loads it by path like a hub checkpoint."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from haldet.util.assets import resolve_embedding

    tok = AutoTokenizer.from_pretrained(resolve_embedding("minilm"))
    torch.manual_seed(seed)
    BertForSequenceClassification(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=64, num_labels=2)
                                  ).save_pretrained(path)
    tok.save_pretrained(path)
    return path
