"""HalluLens (Bang et al., 2025): PreciseWikiQA, LongWiki and NonExistentRefusal with seeded, cached, shared test
sets (`build`, `sets`), HalluLens judges (`judges`; LongWiki's passage retrieval and claim verification are shared
with the longform suite: `haldet.models.passages`, `haldet.judges.claim_verify`), corpus-level rates (`rates`) and
the evaluation with Table 2-shaped output and detection sets (`evaluate`); its tested models (`target`). CLI
(`commands`): `haldet hallulens build|evaluate`.
The judged detection sets load through `dataset` (the adapters `hallulens_*`) and run as the suites of `suite`
(`hallulens`, `hallulens_longwiki`)."""
