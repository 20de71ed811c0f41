"""``specllama serve``: an OpenAI-compatible HTTP server over one model pair.

A surface like the CLI: request bodies become ``SpeculativeLlama`` calls
(``convention="openai"``) and the API's dicts are sent back. Modules:
``command`` (the click command), ``settings`` (constants, flags as data),
``schemas`` (request models), ``calls`` (a body to the API's call and
its answer, shared with ``specllama batch``), ``errors`` (OpenAI error objects), ``model``
(the served ``SpeculativeLlama``), ``worker`` (one generation at a time, in
arrival order), ``jobs`` (JSON and SSE answers), ``metrics`` (Prometheus),
``middleware`` (log line, body limit, API key), ``app`` (the FastAPI app),
``run`` (uvicorn and the shutdown).
"""
