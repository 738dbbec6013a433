"""A recording stand-in for the part of TensorRT's Python API that build_engine.py uses.

TensorRT cannot be installed here (no GPU, NVIDIA's index). This module is put on
``PYTHONPATH`` as ``tensorrt`` for a subprocess running the generated script, and
writes every call to the JSON file named by ``FAKE_TRT_LOG``. It checks what the
script asks TensorRT for (profiles, flags, plugins), never what TensorRT does:
the names and signatures follow TensorRT 10's documented Python API. The network's
inputs are read from the ONNX file with ``onnx`` (dynamic dims -> -1), the way
TensorRT's parser reports them.
"""

import json
import os

__version__ = "10.99.0-fake"
_CALLS = []


def _log(*call):
    _CALLS.append(list(call))
    with open(os.environ["FAKE_TRT_LOG"], "w") as fh:
        json.dump(_CALLS, fh)


class Logger:
    WARNING = "WARNING"

    def __init__(self, severity):
        _log("Logger", severity)


class _Enum:
    def __init__(self, **members):
        self.__dict__.update(members)


NetworkDefinitionCreationFlag = _Enum(STRONGLY_TYPED=5)
MemoryPoolType = _Enum(WORKSPACE="WORKSPACE")
BuilderFlag = _Enum(FP16="FP16", BF16="BF16")


def init_libnvinfer_plugins(logger, namespace):
    _log("init_libnvinfer_plugins", namespace)
    return True


class _Registry:
    def load_library(self, path):
        _log("load_library", path)
        return object()


def get_plugin_registry():
    return _Registry()


class _Tensor:
    def __init__(self, name, shape):
        self.name, self.shape = name, tuple(shape)


class _Network:
    def __init__(self, flags):
        self.flags = flags
        self.inputs = []

    @property
    def num_inputs(self):
        return len(self.inputs)

    def get_input(self, i):
        return self.inputs[i]


class OnnxParser:
    def __init__(self, network, logger):
        self.network = network
        self.num_errors = 0

    def parse_from_file(self, path):
        import onnx

        _log("parse_from_file", os.path.basename(path))
        model = onnx.load(path, load_external_data=False)
        init = {t.name for t in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name not in init:
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim]
                self.network.inputs.append(_Tensor(vi.name, dims))
        return True

    def get_error(self, i):
        return "fake"


class _Profile:
    def set_shape(self, name, lo, opt, hi):
        _log("set_shape", name, list(lo), list(opt), list(hi))


class _Config:
    def __init__(self):
        self.__dict__["plugins_to_serialize"] = []

    def set_memory_pool_limit(self, pool, size):
        _log("set_memory_pool_limit", pool, size)

    def set_flag(self, flag):
        _log("set_flag", flag)

    def add_optimization_profile(self, profile):
        _log("add_optimization_profile")
        return 0

    def __setattr__(self, name, value):
        _log("config." + name, value)
        self.__dict__[name] = value


class Builder:
    def __init__(self, logger):
        _log("Builder")

    def create_network(self, flags):
        _log("create_network", flags)
        return _Network(flags)

    def create_builder_config(self):
        return _Config()

    def create_optimization_profile(self):
        return _Profile()

    def build_serialized_network(self, network, config):
        _log("build_serialized_network")
        return b"fake-plan"
