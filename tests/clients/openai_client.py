"""The official `openai` Python client against a running specgate server.

Usage: SPECGATE_URL=http://127.0.0.1:PORT SPECGATE_KEY=sg-... SPECGATE_MODEL=ID \
       python3 tests/clients/openai_client.py
Exits non-zero (with the failing check) when the server does not behave as OpenAI's API does.
Run by tests/openai_client.rs, which starts the server.
"""

import os
import sys

import openai

BASE = os.environ["SPECGATE_URL"].rstrip("/") + "/v1"
KEY = os.environ["SPECGATE_KEY"]
MODEL = os.environ["SPECGATE_MODEL"]

client = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=120)
messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


# Chat, non-stream.
chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0)
text = chat.choices[0].message.content
check(chat.object == "chat.completion", "chat object type")
check(isinstance(text, str) and len(text) > 0, "chat returns text")
check(chat.choices[0].finish_reason in ("stop", "length"), "chat finish_reason")
check(chat.usage.completion_tokens > 0 and chat.usage.prompt_tokens > 0, "chat usage")
spec = (chat.usage.model_extra or {}).get("speculative")
check(spec is not None and "target_passes" in spec, "usage.speculative is present")

# Chat, stream: same text, ends cleanly, usage chunk on request.
pieces, usage, finish = [], None, None
stream = client.chat.completions.create(
    model=MODEL, messages=messages, max_tokens=24, temperature=0, stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        if c.delta.content:
            pieces.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
check("".join(pieces) == text, "streamed chat text equals the non-stream text")
check(finish in ("stop", "length"), "stream carries a finish_reason")
check(usage is not None and usage.completion_tokens == chat.usage.completion_tokens, "stream usage")

# Log-probabilities, as the client types them.
lp = client.chat.completions.create(
    model=MODEL, messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2,
)
content = lp.choices[0].logprobs.content
check(len(content) == lp.usage.completion_tokens, "a logprob per generated token")
check("".join(t.token for t in content) == lp.choices[0].message.content, "logprob tokens spell the text")
check(all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in content), "logprobs and top_logprobs")
comp_lp = client.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=8, temperature=0, logprobs=1)
check(len(comp_lp.choices[0].logprobs.token_logprobs) == comp_lp.usage.completion_tokens, "completions logprobs")

# Completions.
comp = client.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=16, temperature=0)
check(comp.object == "text_completion" and len(comp.choices[0].text) > 0, "completions")

# Extension fields go through extra_body.
plain = client.chat.completions.create(
    model=MODEL, messages=messages, max_tokens=24, temperature=0,
    extra_body={"speculation": {"enabled": False}, "workload": "chat"},
)
check(plain.choices[0].message.content == text, "speculation off gives the same greedy text")

# A conversation replayed from the client's own response objects (their null refusal,
# tool_calls, ... fields), with the neutral values of fields specgate does not implement.
turns = messages + [chat.choices[0].message.model_dump(), {"role": "user", "content": "And Spain?"}]
follow = client.chat.completions.create(
    model=MODEL, messages=turns, max_tokens=16, temperature=0,
    response_format={"type": "text"}, tools=[], store=False, logit_bias={}, metadata={"app": "t"},
)
check(len(follow.choices[0].message.content) > 0, "a replayed conversation with neutral fields")
try:
    client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=4, response_format={"type": "json_object"},
    )
    check(False, "json mode must fail")
except openai.BadRequestError as e:
    check("response_format" in str(e), "an unsupported value is BadRequestError (400) naming it")

# Models.
ids = [m.id for m in client.models.list().data]
check(MODEL in ids, "models lists the served model")

# Errors map to the client's exceptions.
try:
    client.chat.completions.create(model="no-such-model", messages=messages, max_tokens=4)
    check(False, "unknown model must fail")
except openai.NotFoundError as e:
    check(e.status_code == 404, "unknown model is NotFoundError (404)")
try:
    client.chat.completions.create(model=MODEL, messages=[], max_tokens=4)
    check(False, "empty messages must fail")
except openai.BadRequestError as e:
    check(e.status_code == 400 and "messages" in str(e), "empty messages is BadRequestError (400)")
bad = openai.OpenAI(base_url=BASE, api_key="sg-bad-key", max_retries=0)
try:
    bad.chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
    check(False, "a bad key must fail")
except openai.AuthenticationError as e:
    check(e.status_code == 401, "a bad key is AuthenticationError (401)")

print("all openai client checks passed")
