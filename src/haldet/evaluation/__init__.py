"""Evaluation of detector scores against labels (DESIGN section 8): response-level and unit-level metrics with
bootstrap intervals, thresholds, splits, breakdowns, comparisons, aggregation and cost."""
