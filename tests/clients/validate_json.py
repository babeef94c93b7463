"""Validate generated JSON against its schema with an independent validator.

Reads JSON lines {"what": ..., "schema": {...}, "output": "..."} on stdin; prints one line per
case and exits non-zero when any output does not parse or does not validate (Draft 2020-12).
Run by tests/structured_schemas.rs.
"""

import json
import sys

import jsonschema

failed = 0
for line in sys.stdin:
    case = json.loads(line)
    try:
        value = json.loads(case["output"])
        jsonschema.Draft202012Validator(case["schema"]).validate(value)
        print(f"ok: {case['what']}")
    except (json.JSONDecodeError, jsonschema.ValidationError) as e:
        failed += 1
        print(f"FAILED: {case['what']}: {e}\n  output: {case['output']!r}")
print(f"{failed} failed")
sys.exit(1 if failed else 0)
