"""Reduced precision: build fp16 / bf16 / INT8 variants of a model, measure each
one's latency and accuracy against fp32 on the same inputs, and recommend the
fastest that meets the accuracy target (never one slower than fp32).

``latency`` measures several (model, engine) pairs side by side in one worker;
``variants`` builds and judges the variants; ``charts`` draws the trade-off.
"""
