"""The bundled llama-server, patched to draft and verify with the pymtp engine (``--mtp``)."""

from .launcher import ServerLaunch, free_port, plan_launch, server_binary, stop_server, wait_until_ready

__all__ = ["ServerLaunch", "free_port", "plan_launch", "server_binary", "stop_server", "wait_until_ready"]
