"""Export: deployment artifacts for ONNX Runtime, OpenVINO, TensorRT and Triton,
each reloaded by its engine and verified, in one bundle with a manifest and a report.

    exporter.py     one export start to finish (the facade calls ``export_model``)
    options.py      targets, precision, ``--shapes NAME=MIN:OPT:MAX``, per-target knobs
    prepare.py      the deploy model: preset and precision passes through the verifying pipeline
    reference.py    seeded inputs, the original's outputs, precision-aware criteria
    onnxruntime.py  optimized ONNX (basic/extended portable, all hardware-specific), .ort, session options
    openvino.py     IR via convert_model/save_model (FP32, FP16-compressed, from QDQ INT8)
    tensorrt.py     TensorRT-ready ONNX, build_engine.py, trtexec command, profiles (engine: GPU only)
    triton.py       model repository with config.pbtxt from Triton's own schema
    bundle.py       folder and zip, written under a temporary name and swapped into place
    manifest.py     manifest.json;  report.py: report.md and report.html
    files.py        writing inside the bundle only (no model-supplied file names, links replaced)
    facts.py        hardware-specific layout ops, QDQ, custom ops
    results.py      Artifact, TargetResult, ExportResult (an artifact's Verification: studio.core.compare)
"""
