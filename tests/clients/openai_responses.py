"""The official `openai` Python client's Responses API (`client.responses.create`) against a
running specgate server: plain, streamed, tools and a tool loop, a JSON schema, and errors.

Usage: SPECGATE_URL=http://127.0.0.1:PORT SPECGATE_KEY=sg-... SPECGATE_MODEL=ID \
       python3 tests/clients/openai_responses.py
Run by tests/openai_client.rs, which starts the server.
"""

import json
import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["SPECGATE_URL"].rstrip("/") + "/v1",
                       api_key=os.environ["SPECGATE_KEY"], max_retries=0, timeout=120)
MODEL = os.environ["SPECGATE_MODEL"]
QUESTION = "What is the capital of France? Answer in one sentence."


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def bad_request(what, param, **kwargs):
    try:
        client.responses.create(model=MODEL, max_output_tokens=4, **kwargs)
        check(False, f"{what} must fail")
    except openai.BadRequestError as e:
        body = e.body or {}
        got = body.get("param") if isinstance(body, dict) else None
        check(got == param, f"{what} is BadRequestError (400) naming {param} (got {got})")


# Plain: the same greedy text as chat completions, usage as the Responses API names it.
r = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=24, temperature=0)
chat = client.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=24, temperature=0)
check(r.object == "response" and r.id.startswith("resp_"), "a response object")
check(r.status in ("completed", "incomplete"), f"status {r.status}")
check(r.output_text == chat.choices[0].message.content, "the same greedy text as chat")
check(r.usage.input_tokens == chat.usage.prompt_tokens
      and r.usage.output_tokens == chat.usage.completion_tokens, "usage in and out")
check(r.usage.input_tokens_details.cached_tokens > 0, "the repeated prompt hit the prefix cache")
cut = client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=3, temperature=0)
check(cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens",
      "cut by max_output_tokens: incomplete")

# Instructions and message items with parts.
items = client.responses.create(
    model=MODEL, instructions="You answer in one word.", max_output_tokens=8, temperature=0,
    input=[{"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]}])
check(len(items.output_text) > 0 and items.instructions == "You answer in one word.",
      "instructions and input_text parts")

# Streamed: typed events in order; the deltas spell the final text.
events = list(client.responses.create(model=MODEL, input=QUESTION, max_output_tokens=24,
                                      temperature=0, stream=True))
kinds = [e.type for e in events]
check(kinds[:2] == ["response.created", "response.in_progress"], "stream opens")
check(kinds[-1] in ("response.completed", "response.incomplete"), "stream closes")
check([e.sequence_number for e in events] == list(range(len(events))), "events numbered")
text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
check(text == r.output_text, "streamed deltas spell the text")
check(events[-1].response.output_text == r.output_text, "the final event holds the response")

# Tools: a required call, streamed the same, then the loop closed with its output.
tools = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]
ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
called = client.responses.create(model=MODEL, input=ask, tools=tools, tool_choice="required",
                                 max_output_tokens=48, temperature=0)
calls = [o for o in called.output if o.type == "function_call"]
check(len(calls) >= 1 and calls[0].name == "get_weather", "a required function call")
check("city" in json.loads(calls[0].arguments), "its arguments follow the schema")
check(calls[0].call_id.startswith("call_"), "the call has a call_id")
streamed = list(client.responses.create(model=MODEL, input=ask, tools=tools,
                                        tool_choice="required", max_output_tokens=48,
                                        temperature=0, stream=True))
args = "".join(e.delta for e in streamed if e.type == "response.function_call_arguments.delta")
check(args == calls[0].arguments, "streamed argument deltas spell the same arguments")
loop = client.responses.create(
    model=MODEL, tools=tools, max_output_tokens=32, temperature=0,
    input=ask + [calls[0], {"type": "function_call_output", "call_id": calls[0].call_id,
                            "output": "12 degrees and cloudy"}])
check(loop.status in ("completed", "incomplete") and len(loop.output) >= 1,
      "a tool loop closed by function_call_output")

# A JSON schema through text.format.
schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"]}
js = client.responses.create(
    model=MODEL, input="Give me a person as JSON.", max_output_tokens=60, temperature=0,
    text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
person = json.loads(js.output_text)
check(set(person) == {"name", "age"}, "text.format json_schema answer")

# Continued by previous_response_id: the same answer as resending the conversation.
first = client.responses.create(model=MODEL, input="My name is Ada. Say hello.",
                                max_output_tokens=16, temperature=0)
second = client.responses.create(model=MODEL, previous_response_id=first.id,
                                 input="What is my name?", max_output_tokens=16, temperature=0)
resent = client.responses.create(
    model=MODEL, max_output_tokens=16, temperature=0, store=False,
    input=[{"role": "user", "content": "My name is Ada. Say hello."},
           {"role": "assistant", "content": first.output_text},
           {"role": "user", "content": "What is my name?"}])
check(second.output_text == resent.output_text
      and second.usage.input_tokens == resent.usage.input_tokens,
      "a continuation by id answers as the resent conversation")
check(second.previous_response_id == first.id, "the continuation names its predecessor")
got = client.responses.retrieve(first.id)
check(got.id == first.id and got.output_text == first.output_text, "retrieve a stored response")
deleted = client.responses.delete(first.id)
for what, call in [("retrieve", lambda: client.responses.retrieve(first.id)),
                   ("continue", lambda: client.responses.create(
                       model=MODEL, previous_response_id=first.id, input="Hi",
                       max_output_tokens=4)),
                   ("an unstored response", lambda: client.responses.retrieve(resent.id))]:
    try:
        call()
        check(False, f"{what} after delete must fail")
    except openai.NotFoundError:
        check(True, f"{what}: NotFoundError (404) once deleted or never stored")

# Errors name the Responses field.
bad_request("an image part", "input[0].content[0]",
            input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])
bad_request("a web search tool", "tools[0].type", input="hi", tools=[{"type": "web_search"}])
bad_request("a chat field", "messages", input="hi", extra_body={"messages": []})
bad_request("a reasoning item", "input[0].type", input=[{"type": "reasoning", "summary": []}])
bad_request("max_output_tokens 0", "max_output_tokens", input="hi",
            extra_body={"max_output_tokens": 0})
bad_request("a bad text.format", "text.format.type", input="hi",
            text={"format": {"type": "yaml"}})

print("all openai responses checks passed")
