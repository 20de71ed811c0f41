"""Streaming chat: chunks arrive as llama-cpp-python's chat.completion.chunk
objects; print each delta's content as it comes.

    python examples/chat_stream.py
"""

from _common import parse

from specllama import SpeculativeLlama

args = parse(__doc__, chat=True)
messages = [
    {"role": "system", "content": "You are a helpful assistant who answers briefly."},
    {"role": "user", "content": "Name three things to pack for a day at the beach."},
]
with SpeculativeLlama(args.model, args.model_draft, n_ctx=args.ctx_size) as llm:
    for chunk in llm.create_chat_completion(messages, max_tokens=args.n_predict, stream=True):
        print(chunk["choices"][0]["delta"].get("content", ""), end="", flush=True)
        if "speculative" in chunk:
            print("\n", chunk["speculative"])
