"""Model backends: the protocol stages ask of a target model (`base`), its implementations
(`hf`, `vllm`, `openai`), the choice of backend per model spec (`select`) and the shared structured-LLM client."""
