"""HalluLens (Bang et al., 2025): PreciseWikiQA, LongWiki and NonExistentRefusal with seeded, cached, shared test
sets (`build`, `sets`), HalluLens judges (`judges`, `retrieval`), corpus-level rates (`rates`) and the evaluation
with Table 2-shaped output and detection sets (`evaluate`); its tested models (`target`). CLI (`commands`):
`haldet hallulens build|evaluate`.
The judged detection sets load through `dataset` (the adapters `hallulens_*`) and run as the suites of `suite`
(`hallulens`, `hallulens_longwiki`)."""
