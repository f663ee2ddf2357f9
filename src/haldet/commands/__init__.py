"""Command orchestration behind the CLI (one module per command group): they drive the pipeline and stages;
stages never import them."""
