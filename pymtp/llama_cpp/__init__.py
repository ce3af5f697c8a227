"""llama-cpp-python with MTP: ``from pymtp.llama_cpp import Llama``.

    from pymtp.llama_cpp import Llama
    llm = Llama("model.gguf", n_ctx=4096, mtp="auto", n_draft="auto")
    out = llm.create_chat_completion(messages=[{"role": "user", "content": "Hi!"}])
    print(out["choices"][0]["message"]["content"], llm.mtp_stats["mean_accepted_length"])

Importing this package makes ``llama_cpp`` (llama-cpp-python 0.3.36, installed without its own
native build) load pymtp's libllama, so the process holds one copy of the library; if ``llama_cpp``
was already imported with another one, ImportError says what to do. ``python -m
pymtp.llama_cpp.server`` runs llama-cpp-python's OpenAI-compatible server on this class.
"""

from ._binding import INSTALL, VERSION
from .llama import Llama, llama_cpp

__all__ = ["Llama", "llama_cpp", "INSTALL", "VERSION"]
