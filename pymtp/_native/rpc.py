"""ggml RPC: make the devices of ``ggml-rpc-server`` processes (on this machine or others) devices of
this process, so that a model's offloaded layers (n_gpu_layers) are split across them, as llama.cpp's
``--rpc host:port,...`` does. ggml's backend registry is process-wide: every model loaded afterwards
with n_gpu_layers > 0 uses these devices too."""

from __future__ import annotations

import ctypes as C
import socket

from ..errors import InvalidArgumentError, NativeLibraryError
from . import lib as native_lib

_added: set[str] = set()   # endpoints already registered (a second registration would add a second device)


def parse_endpoints(servers: str | list[str] | tuple[str, ...]) -> list[str]:
    """``"host:port,host:port"`` (or a list of them) -> endpoints; InvalidArgumentError on bad input."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in (s.strip() for s in items):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(f"RPC server {item!r}: expected host:port (e.g. 127.0.0.1:50052)")
        out.append(item)
    if not out:
        raise InvalidArgumentError("no RPC servers given (expected host:port,host:port,...)")
    return out


def offloaded_layers(n_gpu_layers: int) -> int:
    """The layers to offload when RPC servers are given: RPC devices hold offloaded layers only, so
    n_gpu_layers 0 means all of them."""
    return n_gpu_layers or 999


def _ggml() -> C.CDLL:
    native_lib.load()   # libllama first: libggml is its dependency, already in the process
    path = native_lib.lib_dir() / ("libggml.dylib" if native_lib._lib_name().endswith(".dylib") else "libggml.so")
    g = C.CDLL(str(path))
    g.ggml_backend_reg_by_name.restype = C.c_void_p
    g.ggml_backend_reg_by_name.argtypes = [C.c_char_p]
    g.ggml_backend_reg_get_proc_address.restype = C.c_void_p
    g.ggml_backend_reg_get_proc_address.argtypes = [C.c_void_p, C.c_char_p]
    g.ggml_backend_register.restype = None
    g.ggml_backend_register.argtypes = [C.c_void_p]
    return g


def add_servers(servers: str | list[str] | tuple[str, ...]) -> list[str]:
    """Register the devices of these RPC servers (once per endpoint); returns the endpoints."""
    endpoints = parse_endpoints(servers)
    g = _ggml()
    reg = g.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise NativeLibraryError("this build of pymtp has no RPC backend (it was built with PYMTP_RPC=OFF)")
    addr = g.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if not addr:
        raise NativeLibraryError("ggml's RPC backend has no ggml_backend_rpc_add_server")
    add = C.CFUNCTYPE(C.c_void_p, C.c_char_p)(addr)
    for ep in endpoints:
        if ep in _added:
            continue
        host, _, port = ep.rpartition(":")
        try:   # ggml aborts the process on a server it cannot reach: ask first
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except OSError as e:
            raise InvalidArgumentError(f"RPC server {ep}: cannot connect ({e.strerror or e}); start one there "
                                       f"with `ggml-rpc-server -H 0.0.0.0 -p {port}`") from None
        server_reg = add(ep.encode())
        if not server_reg:
            raise InvalidArgumentError(f"RPC server {ep}: ggml could not add it")
        g.ggml_backend_register(server_reg)
        _added.add(ep)
    return endpoints
