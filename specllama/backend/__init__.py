"""The only code that imports llama_cpp: models, files, logs, the plain
llama-cpp-python baseline, RPC servers. Every other module goes through these names."""

from .baseline import plain_completion
from .files import GGUF_MAGIC, check_gguf_file, quantize
from .model import (
                    DEFAULT_N_BATCH,
                    DEFAULT_N_CTX,
                    DEFAULT_N_GPU_LAYERS,
                    LlamaModel,
                    build_info,
                    default_threads,
                    is_llama,
                    supports_gpu_offload,
                    system_info,
)
from .rpc import DEFAULT_RPC_HOST, DEFAULT_RPC_PORT, supports_rpc
from .rpc import add_servers as add_rpc_servers

__all__ = [
    "DEFAULT_N_BATCH",
    "DEFAULT_N_CTX",
    "DEFAULT_N_GPU_LAYERS",
    "DEFAULT_RPC_HOST",
    "DEFAULT_RPC_PORT",
    "GGUF_MAGIC",
    "LlamaModel",
    "add_rpc_servers",
    "build_info",
    "check_gguf_file",
    "default_threads",
    "is_llama",
    "plain_completion",
    "quantize",
    "supports_gpu_offload",
    "supports_rpc",
    "system_info",
]
