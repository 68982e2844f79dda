"""Insight beyond one heatmap, built on the core's hooked passes: evidence views (gallery,
evidence against, contrast, layer sweep, step by step, trust curves) and diagnostics (layer
statistics, gradient flow, interventions)."""
