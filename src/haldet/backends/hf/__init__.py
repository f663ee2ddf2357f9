"""The `hf` backend (transformers, white-box), one concept per module, lower modules never importing higher ones:

`loading` (model resolution, GGUF conversion cache, `load_tokenizer`, `LoadedModel`, `DecodingModel`) < `states`
(pooling, ICR) < `sampling` (seeded nucleus draws) < `kv_cache` (the lean loop's preallocated cache) < `pool`
(prefill, the rows decoded together) < `decode` (the lean decoding loop) < `answer_reader` (evidence read while
decoding) < `tokens`, `forward` (teacher-forced passes) < `lean`, `reference` (the backend's calls through the lean
loop, and through transformers' `generate`) < `backend` (`HFBackend`, which ties them together). Import from the module
that defines a name; this package re-exports nothing.
"""
