"""Evaluation of detector scores against labels: response-level and unit-level metrics with
bootstrap intervals, thresholds, splits, breakdowns, comparisons, aggregation and cost."""
