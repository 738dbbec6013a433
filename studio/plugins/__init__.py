"""Custom-op plugin authoring: from a custom op found in a model to a working,
verified implementation for each engine.

* :mod:`signature` -- the op as the model uses it (attributes, ports, captured samples);
* :mod:`reference` -- NumPy references by ``(domain, op_type)``, the numeric oracle;
* :mod:`ort_python` / :mod:`ov_python` -- the op as an ONNX Runtime Python op and as an
  OpenVINO conversion extension, run for real in one-off, confined workers
  (:mod:`confine`, :mod:`usercode`);
* :mod:`scaffold` -- C++ skeletons (ORT custom-op library, TensorRT IPluginV3,
  OpenVINO ``ov::op::Op`` extension) and Python packages rendered from ``templates/``;
* :mod:`build` -- compile a package's C++ with CMake and run it against the reference.
"""
