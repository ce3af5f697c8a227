"""The bundled llama-server, patched to draft and verify with the pymtp engine (``--mtp``)."""

from .launcher import ServerLaunch, plan_launch, server_binary, wait_until_ready

__all__ = ["ServerLaunch", "plan_launch", "server_binary", "wait_until_ready"]
