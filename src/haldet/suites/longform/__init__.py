"""Long answers scored claim by claim (the `longform` scenario; docs/longform.md).

Modules: `dataset` (the registered adapter `factscore_bio`: FActScore's labelled biographies, claims with the
data's own labels), `entities` (the registered adapter `bio_entities`: an entity list whose biographies the run's
model writes), `suite` (the registered suite `longform`: claim-level metrics, extracted claims, label sources),
`from_claims` (each answer's response-level score from its claims), `nli_labels` (claim labels by NLI against a
reference text), `verify_labels` (claim labels by retrieval + an LLM verifier), `agreement` (a claim labeller's
accuracy and kappa against the human labels), `selfcheck_claims` (the registered detector: each claim against the
K samples), `luq` (LUQ: 1 - the mean NLI support of each unit by the samples), `p_true_claims` (claim-level
P(True), from the `claim_p_true` stage).
"""
