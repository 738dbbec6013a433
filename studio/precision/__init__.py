"""Reduced precision: build fp16 / bf16 / INT8 variants of a model, measure each
one's latency and accuracy against fp32 on the same inputs, and recommend the
fastest that meets the accuracy target (never one slower than fp32).

``catalog`` lists the variants; ``variants`` builds and judges them (the flow); ``report`` holds the
results; ``recommend`` picks one; ``cpu`` says what this CPU computes fast; ``latency`` measures several
(model, engine) pairs side by side in one worker; ``run`` is the request's one door. The trade-off figure
is ``studio.charts.precision``'s.
"""
