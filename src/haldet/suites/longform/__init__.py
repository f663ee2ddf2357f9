"""Long answers scored claim by claim (the `longform` scenario).

Modules: `dataset` (the registered adapter `factscore_bio`: FActScore's labelled biographies, claims with the
data's own labels), `suite` (the registered suite `longform`: claim-level metrics and the response-level rows
computed from each answer's claims), `from_claims` (those response-level scores and rows).
"""
