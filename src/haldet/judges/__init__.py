"""Judges that label answers correct or hallucinated: rule judges per task type, the execution
judge and its sandbox, the LLM judge, the default cascade over them and judge agreement."""
