"""The official `openai` Python client against a running specgate server.

Usage: SPECGATE_URL=http://127.0.0.1:PORT SPECGATE_KEY=sg-... SPECGATE_MODEL=ID \
       python3 tests/clients/openai_client.py
Exits non-zero (with the failing check) when the server does not behave as OpenAI's API does.
Run by tests/openai_client.rs, which starts the server.
"""

import json
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

# Penalties and logit bias: speculation (n-gram drafts, which propose the repeats the
# penalties turn against) gives plain decoding's greedy text under the same settings.
code = [{"role": "user", "content": "Write a Python function that returns the sum of a list, "
         "then the same function again with a docstring."}]
shaped = dict(frequency_penalty=0.5, presence_penalty=0.3, logit_bias={"28": -100},
              extra_body={"repetition_penalty": 1.1})
unshaped = client.chat.completions.create(model=MODEL, messages=code, max_tokens=48, temperature=0)
runs = {}
for name, spec in [("plain", {"enabled": False}), ("ngram", {"strategy": "ngram", "k": 4}),
                   ("suffix", {"strategy": "suffix", "k": 8})]:
    body = dict(shaped["extra_body"], speculation=spec)
    r = client.chat.completions.create(
        model=MODEL, messages=code, max_tokens=48, temperature=0,
        **{k: v for k, v in shaped.items() if k != "extra_body"}, extra_body=body,
    )
    runs[name] = r.choices[0].message.content
check(runs["plain"] != unshaped.choices[0].message.content, "penalties change the greedy answer")
check(runs["ngram"] == runs["plain"] and runs["suffix"] == runs["plain"],
      "speculation with penalties gives plain decoding's text with them")
for bad in [dict(frequency_penalty=2.5), dict(logit_bias={"999999": 1}),
            dict(extra_body={"repetition_penalty": 0})]:
    try:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, **bad)
        check(False, f"{bad} must fail")
    except openai.BadRequestError as e:
        field = next(iter(bad if "extra_body" not in bad else bad["extra_body"]))
        check(field in str(e), f"{bad} is BadRequestError (400) naming {field}")

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
        model=MODEL, messages=messages, max_tokens=4, reasoning_effort="high",
    )
    check(False, "reasoning_effort must fail")
except openai.BadRequestError as e:
    check("reasoning_effort" in str(e), "an unsupported value is BadRequestError (400) naming it")

# JSON mode and a schema: the answer parses (and follows the schema) by construction.
jm = client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "Give me a JSON object with a name and an age."}],
    max_tokens=120, temperature=0, response_format={"type": "json_object"},
)
check(jm.choices[0].finish_reason == "stop", "json mode ends on its own")
check(isinstance(json.loads(jm.choices[0].message.content), dict), "json mode answers a JSON object")
city = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
        "population": {"type": "integer", "minimum": 0}}, "required": ["city", "population"],
        "additionalProperties": False}
js = client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "Name a big city and its population."}],
    max_tokens=60, temperature=0,
    response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": city, "strict": True}},
)
answer = json.loads(js.choices[0].message.content)
check(set(answer) == {"city", "population"} and isinstance(answer["population"], int), "json_schema answer")

# Tool calls.
weather = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
clock = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "maxLength": 20}}, "required": ["zone"], "additionalProperties": False}}}
ask = [{"role": "user", "content": "What is the weather in Paris?"}]


def valid_weather(args):
    return set(args) == {"city", "unit"} and isinstance(args["city"], str) \
        and len(args["city"]) <= 30 and args["unit"] in ("celsius", "fahrenheit")


tc = client.chat.completions.create(
    model=MODEL, messages=ask, tools=[weather, clock], tool_choice="required",
    parallel_tool_calls=False, max_tokens=96, temperature=0,
)
calls = tc.choices[0].message.tool_calls
check(tc.choices[0].finish_reason == "tool_calls" and len(calls) == 1, "a required call")
call = calls[0]
args = json.loads(call.function.arguments)
check(call.type == "function" and call.id.startswith("call_"), "the call's id and type")
check(call.function.name != "get_weather" or valid_weather(args), "arguments match the schema")
named = client.chat.completions.create(
    model=MODEL, messages=ask, tools=[weather, clock], max_tokens=96, temperature=0,
    tool_choice={"type": "function", "function": {"name": "get_weather"}},
)
ncall = named.choices[0].message.tool_calls[0]
check(ncall.function.name == "get_weather" and valid_weather(json.loads(ncall.function.arguments)),
      "a named function is called with valid arguments")
# Streamed: the deltas assemble into the same call.
parts = {}
finish = None
for chunk in client.chat.completions.create(
    model=MODEL, messages=ask, tools=[weather, clock], max_tokens=96, temperature=0,
    tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True,
):
    for c in chunk.choices:
        finish = c.finish_reason or finish
        for d in c.delta.tool_calls or []:
            p = parts.setdefault(d.index, {"name": "", "arguments": "", "id": None})
            p["id"] = p["id"] or d.id
            p["name"] += d.function.name or ""
            p["arguments"] += d.function.arguments or ""
check(finish == "tool_calls" and len(parts) == 1, "a streamed call ends with tool_calls")
check(parts[0]["name"] == "get_weather" and parts[0]["arguments"] == ncall.function.arguments,
      "streamed deltas assemble into the same call")
none = client.chat.completions.create(
    model=MODEL, messages=ask, tools=[weather], tool_choice="none", max_tokens=24, temperature=0,
)
check(none.choices[0].message.tool_calls is None and none.choices[0].message.content, "none never calls")
# The call's result goes back, replayed from the response object.
turns = ask + [named.choices[0].message.model_dump(),
               {"role": "tool", "tool_call_id": ncall.id, "content": "18 degrees and sunny"}]
after = client.chat.completions.create(model=MODEL, messages=turns, tools=[weather], max_tokens=24, temperature=0)
check(after.choices[0].message.content or after.choices[0].message.tool_calls, "a conversation with a tool result")
for bad, what in [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [weather]}, "tool_choice"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}}}, "response_format"),
]:
    try:
        client.chat.completions.create(model=MODEL, messages=ask, max_tokens=8, **bad)
        check(False, f"a bad {what} must fail")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and ((e.param or "").startswith(what) or what in str(e)), f"a bad {what} is BadRequestError (400)")

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
