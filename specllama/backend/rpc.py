"""llama.cpp's RPC backend: a model's layers on ``ggml-rpc`` servers, and the server itself.

llama-cpp-python dropped its ``rpc_servers`` parameter (0.3.10); this module
does what llama.cpp's own tools do (``common/arg.cpp``: ``add_rpc_devices``;
``tools/rpc/rpc-server.cpp``), through ctypes. Every ggml symbol is looked up
through llama-cpp-python's own ``libllama`` handle, so it resolves in the
``libggml`` that libllama links. (The wheel also ships a second copy named
``libggml.so``: opening that one gives a second, unconnected backend registry,
and the model silently stays on the CPU.)

Once a server is registered, every model this process loads gets an explicit
device list (:func:`offload_devices`): its own RPC servers, then the local GPUs;
any other (a plain ``llama_cpp.Llama`` too) the local GPUs only. So a draft
stays local unless it names servers of its own.

llama.cpp's RPC client has no recoverable error path: a server that cannot be
reached, or that dies while a model uses it, aborts the process. So
:func:`add_servers` checks each server (a TCP connect and the RPC handshake,
with a timeout) before anything is loaded, and an abort hook makes the last
line the process prints name the endpoints, and ends it at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import struct
import sys
import threading
from collections import Counter
from typing import Iterator, Sequence

import llama_cpp

from ..errors import SpecLlamaError
from .log import real_stderr_fd

DEFAULT_RPC_HOST = "127.0.0.1"
DEFAULT_RPC_PORT = 50052  # llama.cpp's rpc-server default
CONNECT_TIMEOUT = 5.0  # seconds for the TCP connect, then for the handshake's answer
# ggml-rpc.h and ggml-rpc.cpp of the llama.cpp inside llama-cpp-python 0.3.36
RPC_PROTO_MAJOR, RPC_PROTO_MINOR = 7, 0
RPC_CMD_HELLO = 14
RPC_CONN_CAPS_SIZE = 24
RPC_REGISTRY = "RPC"  # the registry name of every RPC device

_DEV_CPU, _DEV_GPU, _DEV_IGPU = 0, 1, 2  # enum ggml_backend_dev_type


def rebuild_command() -> str:
    """The install line for a llama-cpp-python with the RPC backend (this version)."""
    return (f'CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir --no-deps '
            f'"llama-cpp-python=={llama_cpp.__version__}"')


def supports_rpc() -> bool:
    """Whether this llama-cpp-python build has llama.cpp's RPC backend."""
    return bool(llama_cpp.llama_supports_rpc())


def require_rpc(option: str = "--rpc") -> None:
    """Raise, saying how to rebuild, unless this build has the RPC backend."""
    if not supports_rpc():
        raise SpecLlamaError(f"{option} needs llama-cpp-python built with llama.cpp's RPC backend, and this build "
                             f"has none; rebuild it: {rebuild_command()}")


# -- ggml through libllama's handle -------------------------------------------

class _DevCaps(ctypes.Structure):
    _fields_ = [("async_", ctypes.c_bool), ("host_buffer", ctypes.c_bool), ("buffer_from_host_ptr", ctypes.c_bool),
                ("events", ctypes.c_bool), ("mmap_support", ctypes.c_bool)]


class _DevProps(ctypes.Structure):  # struct ggml_backend_dev_props
    _fields_ = [("name", ctypes.c_char_p), ("description", ctypes.c_char_p), ("memory_free", ctypes.c_size_t),
                ("memory_total", ctypes.c_size_t), ("type", ctypes.c_int), ("device_id", ctypes.c_char_p),
                ("caps", _DevCaps)]


_ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_START_SERVER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_void_p))
_P, _S = ctypes.c_void_p, ctypes.c_char_p


def _fn(name: str, restype, *argtypes):
    f = llama_cpp.llama_cpp._lib[name]  # a fresh function object: llama_cpp's own stay as they are
    f.restype, f.argtypes = restype, list(argtypes)
    return f


class _Ggml:
    def __init__(self) -> None:
        self.reg_by_name = _fn("ggml_backend_reg_by_name", _P, _S)
        self.reg_name = _fn("ggml_backend_reg_name", _S, _P)
        self.reg_proc = _fn("ggml_backend_reg_get_proc_address", _P, _P, _S)
        self.reg_dev_count = _fn("ggml_backend_reg_dev_count", ctypes.c_size_t, _P)
        self.reg_dev_get = _fn("ggml_backend_reg_dev_get", _P, _P, ctypes.c_size_t)
        self.register = _fn("ggml_backend_register", None, _P)
        self.dev_count = _fn("ggml_backend_dev_count", ctypes.c_size_t)
        self.dev_get = _fn("ggml_backend_dev_get", _P, ctypes.c_size_t)
        self.dev_by_name = _fn("ggml_backend_dev_by_name", _P, _S)
        self.dev_by_type = _fn("ggml_backend_dev_by_type", _P, ctypes.c_int)
        self.dev_name = _fn("ggml_backend_dev_name", _S, _P)
        self.dev_type = _fn("ggml_backend_dev_type", ctypes.c_int, _P)
        self.dev_reg = _fn("ggml_backend_dev_backend_reg", _P, _P)
        self.dev_props = _fn("ggml_backend_dev_get_props", None, _P, ctypes.POINTER(_DevProps))
        self.set_abort_callback = _fn("ggml_set_abort_callback", _P, _ABORT_CALLBACK)
        self.print_backtrace = _fn("ggml_print_backtrace", None)

    def proc(self, name: str, prototype):
        reg = self.reg_by_name(RPC_REGISTRY.encode())
        address = self.reg_proc(reg, name.encode()) if reg else None
        if not address:
            raise SpecLlamaError(f"this llama-cpp-python's RPC backend has no {name}; rebuild it: {rebuild_command()}")
        return prototype(address)

    def is_rpc(self, dev: int) -> bool:
        return (self.reg_name(self.dev_reg(dev)) or b"").decode() == RPC_REGISTRY


_ggml: _Ggml | None = None


def _g() -> _Ggml:
    global _ggml
    if _ggml is None:
        _ggml = _Ggml()
    return _ggml


# -- the client side ----------------------------------------------------------

_lock = threading.RLock()
_registered: dict[str, tuple[int, ...]] = {}  # endpoint -> its devices, registered with llama.cpp
_in_use: Counter[str] = Counter()  # endpoint -> models of this process on it (holding its one connection)
_abort_hook = None


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.partition(":")
    return host, int(port)


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def probe(endpoint: str, *, timeout: float = CONNECT_TIMEOUT, handshake: bool = True) -> None:
    """Check that a ggml RPC server answers at ``endpoint`` (``host:port``):
    a TCP connect, then (``handshake``) its HELLO, each within ``timeout`` seconds.

    Raises:
        SpecLlamaError: one line naming the endpoint and what went wrong.
    """
    host, port = _split(endpoint)
    where = f"the RPC server at {endpoint}"
    try:
        address = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    except (socket.gaierror, UnicodeError) as e:
        raise SpecLlamaError(f"cannot reach {where}: {host!r} does not resolve to an IPv4 address "
                             f"({getattr(e, 'strerror', None) or e})") from None
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except socket.timeout:
        raise SpecLlamaError(f"cannot reach {where}: no answer within {timeout:g} s (is `specllama rpc-server` "
                             "running there, and the port open?)") from None
    except ConnectionRefusedError:
        raise SpecLlamaError(f"cannot reach {where}: connection refused (nothing listens there; start "
                             f"`specllama rpc-server --host HOST --port {port}` on that machine)") from None
    except OSError as e:
        raise SpecLlamaError(f"cannot reach {where}: {e.strerror or e}") from None
    with sock:
        if not handshake:
            return
        try:
            sock.sendall(struct.pack("<BQ", RPC_CMD_HELLO, RPC_CONN_CAPS_SIZE) + bytes(RPC_CONN_CAPS_SIZE))
            (size,) = struct.unpack("<Q", _recv(sock, 8))
            answer = _recv(sock, size) if size == 4 + RPC_CONN_CAPS_SIZE else b""
        except socket.timeout:
            raise SpecLlamaError(f"{where} accepted the connection but did not answer within {timeout:g} s (a "
                                 "ggml RPC server serves one client at a time: is another process using it?)") from None
        except (OSError, EOFError):
            answer = b""
        if not answer:
            raise SpecLlamaError(f"{where} did not answer as a ggml RPC server of protocol {RPC_PROTO_MAJOR}.x "
                                 "(is it `specllama rpc-server`, or llama.cpp's rpc-server of the same version?)")
        major, minor, patch = answer[:3]
        if major != RPC_PROTO_MAJOR or minor > RPC_PROTO_MINOR:
            raise SpecLlamaError(f"{where} speaks RPC protocol {major}.{minor}.{patch} and this llama-cpp-python "
                                 f"{RPC_PROTO_MAJOR}.{RPC_PROTO_MINOR}.x: install llama-cpp-python "
                                 f"{llama_cpp.__version__} (built with RPC) on both machines")


def add_servers(endpoints: Sequence[str], *, timeout: float = CONNECT_TIMEOUT, option: str = "--rpc") -> None:
    """Check each server (:func:`probe`), then register its devices with
    llama.cpp (once per endpoint and process), as llama.cpp's ``--rpc`` does.

    Raises:
        SpecLlamaError: this build has no RPC backend, or a server does not
            answer (every server is checked before any is registered), or a
            server offers no devices (those before it stay registered).
    """
    if not endpoints:
        return
    require_rpc(option)
    g = _g()
    with _lock:
        for endpoint in endpoints:
            # a server already holding a model of ours is busy with us: it cannot answer a second HELLO
            probe(endpoint, timeout=timeout, handshake=not _in_use[endpoint])
        add_server = g.proc("ggml_backend_rpc_add_server", _ADD_SERVER)
        _install_abort_hook()
        for endpoint in endpoints:
            if endpoint in _registered:
                continue
            reg = add_server(endpoint.encode())
            if not reg:
                raise SpecLlamaError(f"the RPC server at {endpoint} offers no devices")
            _make_local_the_default()  # before the registry holds a device no model asked for
            g.register(reg)
            _registered[endpoint] = tuple(g.reg_dev_get(reg, i) for i in range(g.reg_dev_count(reg)))


def registered() -> tuple[str, ...]:
    """The RPC servers registered in this process, in order."""
    with _lock:
        return tuple(_registered)


def local_offload_devices() -> list[int]:
    """The local devices llama.cpp would offload to (its default choice,
    without RPC servers): the GPUs, one per device id; else the integrated GPUs."""
    g = _g()
    gpus: list[int] = []
    igpus: list[int] = []
    seen_ids: set[bytes] = set()
    for i in range(g.dev_count()):
        dev = g.dev_get(i)
        kind = g.dev_type(dev)
        if kind == _DEV_GPU and not g.is_rpc(dev):
            props = _DevProps()
            g.dev_props(dev, ctypes.byref(props))
            if props.device_id and props.device_id in seen_ids:
                continue  # the same GPU seen through a second backend
            if props.device_id:
                seen_ids.add(props.device_id)
            gpus.append(dev)
        elif kind == _DEV_IGPU and (not igpus or g.dev_reg(dev) == g.dev_reg(igpus[-1])):
            igpus.append(dev)
    return gpus or igpus


def offload_devices(endpoints: Sequence[str]) -> tuple[list[int], list[str]] | None:
    """The devices a model on ``endpoints`` (none: local only) may offload to,
    RPC servers first as llama.cpp orders them, and their names; None when no
    RPC server is registered in this process (llama.cpp's own choice then)."""
    g = _g()
    with _lock:
        if not _registered:
            return None
        devices = [d for endpoint in endpoints for d in _registered[endpoint]] + local_offload_devices()
    names = []
    for dev in devices:
        name = (g.dev_name(dev) or b"?").decode()
        endpoint = next((e for e, ds in _registered.items() if dev in ds), None)
        names.append(f"{name} ({endpoint})" if endpoint else name)
    return devices, names


_chosen = threading.local()  # .devices: the device array of the model this thread is loading
_local_only = None  # once a server is registered: the default for every other model load
_no_extra_buffers = False  # every model loads without llama.cpp's extra CPU buffer types (backend/cpu.py)
_original_default_params = None


def _default_params():
    """llama_model_default_params, with ``devices`` set once RPC servers are
    registered: the loading model's own list, else the local devices only, so
    that no model (a plain ``llama_cpp.Llama`` included) lands on a server it
    did not name, nor touches a server that has gone since. Where the CPU's
    AMX is refused (:mod:`.cpu`), without the extra CPU buffer types."""
    params = _original_default_params()  # type: ignore[misc]
    array = getattr(_chosen, "devices", None)
    array = array if array is not None else _local_only
    if array is not None:
        params.devices = ctypes.cast(array, ctypes.c_void_p)
    if _no_extra_buffers:
        params.use_extra_bufts = False
    return params


def _install_default_params() -> None:
    """``llama_model_default_params`` (what ``llama_cpp.Llama`` calls) becomes :func:`_default_params`."""
    global _original_default_params
    if _original_default_params is None:
        module = llama_cpp.llama_cpp
        _original_default_params = module.llama_model_default_params
        module.llama_model_default_params = _default_params
        if getattr(llama_cpp, "llama_model_default_params", None) is _original_default_params:
            llama_cpp.llama_model_default_params = _default_params  # the package's re-export too


def load_without_extra_buffers() -> bool:
    """Every model this process loads from now on skips llama.cpp's extra CPU
    buffer types (AMX, repacked weights): where AMX is refused (:mod:`.cpu`).
    Returns whether this changed the setting (the first call)."""
    global _no_extra_buffers
    changed, _no_extra_buffers = not _no_extra_buffers, True
    _install_default_params()
    return changed


def _devices_array(devices: Sequence[int]):
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)  # NULL-terminated


def _make_local_the_default() -> None:
    """From the first registration on, every model load gets an explicit device
    list (``llama_model_params.devices``, which llama-cpp-python does not expose)."""
    global _local_only
    if _local_only is None:
        _local_only = _devices_array(local_offload_devices())
    _install_default_params()


@contextlib.contextmanager
def model_devices(devices: Sequence[int] | None) -> Iterator[object]:
    """Within this block, a ``llama_cpp.Llama`` created by this thread loads
    its model with ``devices``; None: the process's default (llama.cpp's own
    choice, or local devices only once a server is registered).

    Yields:
        the device array (None for the default): ``llama_model_params.devices``
        points into it, so the model keeps it as long as it lives.
    """
    if devices is None:
        yield None
        return
    previous = getattr(_chosen, "devices", None)
    array = _devices_array(devices)
    _chosen.devices = array
    try:
        yield array
    finally:
        _chosen.devices = previous


def hold(endpoints: Sequence[str]) -> None:
    """A model of this process now uses ``endpoints`` (its connection is open)."""
    with _lock:
        _in_use.update(endpoints)


def release(endpoints: Sequence[str]) -> None:
    """A model on ``endpoints`` was freed."""
    with _lock:
        _in_use.subtract(endpoints)


def _reachable(endpoint: str, timeout: float) -> bool:
    try:
        socket.create_connection(_split(endpoint), timeout=timeout).close()
        return True
    except OSError:
        return False


def _on_abort(message: bytes | None) -> None:
    """ggml is about to abort(): for an RPC failure, say which server was lost and end now."""
    text = (message or b"").decode("utf-8", errors="replace")
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    if "ggml-rpc" not in text and RPC_REGISTRY not in text:
        os.write(real_stderr_fd(), (text + "\n").encode())
        _g().print_backtrace()
        return  # ggml aborts, as it would have
    endpoints = list(_registered)
    lost = [e for e in endpoints if not _reachable(e, 0.5)] or endpoints
    servers = f"server{'s' if len(lost) > 1 else ''} at {', '.join(lost)}"
    os.write(real_stderr_fd(), (f"\n{text}\nError: lost the RPC {servers} (llama.cpp's RPC client cannot recover, "
                                "so the process ends here; restart the server and run again)\n").encode())
    os._exit(1)  # every thread ends with the process: nothing is left running


def _install_abort_hook() -> None:
    global _abort_hook
    if _abort_hook is None:
        _abort_hook = _ABORT_CALLBACK(_on_abort)  # kept: ggml holds the pointer
        _g().set_abort_callback(_abort_hook)


# -- the server side ----------------------------------------------------------

def server_devices(names: Sequence[str] = ()) -> list[int]:
    """The devices an RPC server offers, as llama.cpp's rpc-server picks them:
    ``names`` (``CUDA0``, ``CPU``, ...), else every GPU, else the CPU."""
    g = _g()
    if names:
        devices = []
        for name in names:
            dev = g.dev_by_name(name.encode())
            if not dev:
                known = ", ".join((g.dev_name(g.dev_get(i)) or b"?").decode() for i in range(g.dev_count()))
                raise SpecLlamaError(f"unknown device {name!r}; this build has: {known}")
            devices.append(dev)
        return devices
    devices = [g.dev_get(i) for i in range(g.dev_count())
               if g.dev_type(g.dev_get(i)) in (_DEV_GPU, _DEV_IGPU) and not g.is_rpc(g.dev_get(i))]
    return devices or [g.dev_by_type(_DEV_CPU)]


def device_name(dev: int) -> str:
    return (_g().dev_name(dev) or b"?").decode()


def serve(endpoint: str, *, devices: Sequence[int], n_threads: int, cache_dir: str | None) -> None:
    """Run llama.cpp's RPC server loop (``ggml_backend_rpc_start_server``)
    on ``endpoint``; it returns only if the server cannot start. The loop
    runs inside C, where no Python signal handler runs: call this from a
    thread, and let the main thread wait for signals."""
    require_rpc("rpc-server")
    start = _g().proc("ggml_backend_rpc_start_server", _START_SERVER)
    _line_buffered_c_stdout()
    array = (ctypes.c_void_p * len(devices))(*devices)
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, n_threads, len(devices), array)


def _line_buffered_c_stdout() -> None:
    """llama.cpp's server prints with C stdio: line-buffer it, so its lines
    reach a pipe (a log, a test) as they are written."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None)
        stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.setvbuf.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t]
        libc.setvbuf(stdout, None, 1, 0)  # _IOLBF


def flush_c_stdio() -> None:
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None)
        libc.fflush.argtypes = [ctypes.c_void_p]
        libc.fflush(None)
