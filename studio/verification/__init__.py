"""Verification of a transformed model against its original: the interface, ``onnx.checker`` and the numbers
on seeded feeds (ORT with optimizations off as the reference). A service, not a pass: the pipeline verifies
every pass with it, and edits (:mod:`studio.edit.verify`) and exports (:mod:`studio.export.reference`) verify
their results with the same :class:`~studio.verification.verifier.Verifier`."""
