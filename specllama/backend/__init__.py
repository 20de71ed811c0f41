"""The only code that imports llama_cpp: models, files, logs, the plain
llama-cpp-python baseline. Every other module goes through these names."""

from .baseline import plain_completion
from .files import GGUF_MAGIC, check_gguf_file, quantize
from .model import (DEFAULT_N_BATCH, DEFAULT_N_CTX, DEFAULT_N_GPU_LAYERS, LlamaModel, default_threads, is_llama,
                    supports_gpu_offload, system_info)

__all__ = [
    "DEFAULT_N_BATCH",
    "DEFAULT_N_CTX",
    "DEFAULT_N_GPU_LAYERS",
    "GGUF_MAGIC",
    "LlamaModel",
    "check_gguf_file",
    "default_threads",
    "is_llama",
    "plain_completion",
    "quantize",
    "supports_gpu_offload",
    "system_info",
]
