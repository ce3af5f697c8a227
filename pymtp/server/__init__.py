"""The bundled llama-server, patched to draft and verify with the pymtp engine (``--mtp``)."""

from .launcher import ServerLaunch, free_port, plan_launch, server_binary, wait_until_ready
from .process import STOP_TIMEOUT_S, Terminated, signals_raise_interrupt, start_server, stop_server

__all__ = ["ServerLaunch", "STOP_TIMEOUT_S", "Terminated", "free_port", "plan_launch", "server_binary",
           "signals_raise_interrupt", "start_server", "stop_server", "wait_until_ready"]
