"""Accuracy: compare two models (versions, engines, precisions) on the same inputs,
and find the first layer where they diverge.

``runs`` runs feed sets through one engine in a worker (one session, many
inferences), ``compare_models`` turns two such runs into a ``ModelComparison``,
``layerwise`` compares intermediate tensors chunk by chunk (its chart is
``studio.charts.accuracy``).
"""
