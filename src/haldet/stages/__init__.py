"""Evidence stages (generate, sample, features, auxiliary, annotate, verdict, claims, claim_p_true, redeep): each
declares the signals it provides and computes them once per item, resumably; `plan` orders them and `loader` reads
their records back."""
