"""The `hf` backend (transformers, white-box), one concept per module, lower modules never importing higher ones:

`loading` (model resolution, GGUF conversion cache, `LoadedModel`) < `states` (pooling, ICR) < `sampling` (seeded
nucleus draws) < `decode` (the lean decoding loop) < `answer_reader` (evidence read while decoding) < `tokens`,
`forward` (teacher-forced passes) < `backend` (`HFBackend`, which ties them together). Import from the module
that defines a name; this package re-exports nothing.
"""
