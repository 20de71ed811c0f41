"""An existing llama-cpp-python chat loop, sped up by changing two lines.

Before:
    from llama_cpp import Llama
    llm = Llama(model_path=TARGET, n_ctx=2048)
After (the two changed lines are marked):
    from specllama import SpeculativeLlama                      # changed
    llm = SpeculativeLlama(TARGET, DRAFT, n_ctx=2048)             # changed

    python examples/llama_cpp_drop_in.py
"""

from _common import parse

from specllama import SpeculativeLlama  # changed: was `from llama_cpp import Llama`

args = parse(__doc__, chat=True)
llm = SpeculativeLlama(args.model, args.model_draft, n_ctx=args.ctx_size)  # changed: was Llama(model_path=...)

# --- the application, unchanged ---
history = [{"role": "system", "content": "You are a concise assistant."}]
for question in ["What is the capital of France?", "And of Italy?"]:
    history.append({"role": "user", "content": question})
    reply = llm.create_chat_completion(history, max_tokens=args.n_predict, temperature=0.2)
    answer = reply["choices"][0]["message"]["content"]
    history.append({"role": "assistant", "content": answer})
    print(f"> {question}\n{answer}\n")
