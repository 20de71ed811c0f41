"""``specllama serve``: an OpenAI-compatible HTTP server over one model pair.

A surface like the CLI: request bodies become ``SpeculativeLlama`` calls
(``policy="openai"``) and the API's dicts are sent back. Modules:
``command`` (the click command), ``settings`` (constants, flags as data),
``schemas`` (request models), ``errors`` (OpenAI error objects), ``model``
(the served ``SpeculativeLlama``), ``worker`` (one generation at a time, in
arrival order), ``jobs`` (JSON and SSE answers), ``metrics`` (Prometheus),
``middleware`` (log line, body limit, API key), ``app`` (the FastAPI app),
``run`` (uvicorn and the shutdown).
"""

# The command module is reached through specllama.cli, which imports it at its
# end; importing cli first here makes ``import specllama.server.command`` work
# on its own too.
import specllama.cli  # noqa: E402,F401
