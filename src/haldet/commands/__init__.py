"""Command orchestration behind the CLI (one module per command group): they drive the run flow and stages;
stages never import them."""
