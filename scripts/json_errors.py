#!/usr/bin/env python3
"""Prints mock-core/tests/data/json_errors.json: how Python's `json` (0.5.3 and 0.5.15 read bodies with it) and
orjson (0.5.23's `ORJSONRequest`) refuse each malformed body of a fixed list, message and position.

    target/real-sglang/0.5.23/venv/bin/python scripts/json_errors.py > mock-core/tests/data/json_errors.json

(any Python with orjson installed will do; the values above were printed by CPython 3.11 and orjson 3).
"""

import json
try:
    import orjson
except ImportError:
    orjson = None
cases = [
 "{not json", "  ", "{", "[", "{\"a\"", "{\"a\":", "{\"a\":1", "{\"a\" 1}", "{\"a\":1,}", "{\"a\":1 \"b\":2}", "{,}", "{\"a\":}",
 "[1,]", "[1 2]", "[,1]", "[1,,2]", "]", "}", "{\"a\":1}x", "{\"a\":1} {}", "nul", "tru", "fals", "nulll", "truex",
 "NaN", "Infinity", "-Infinity", "-", "01", "1.", "1.e5", "1e", "1e+", "-x", ".5", "+1", "0x10",
 "\"abc", "\"a\\qb\"", "\"a\\u12g4\"", "\"a\nb\"", "\"a\\", "'a'", "{'a':1}", "{\"a\":tru}", "{\"a\":[1,2}", "[{\"a\":1]",
 "{\"text\":\"hi\",}", "{\"text\": \"héllo\" x}", "\"\u00e9\" x", "123456789012345678901234567890", "1e400", "[1,2", "{\"a\":1,\"a\"",
 "\t{\"a\" :\n 1 ,\n}", "\ufeff{}",
 # Valid constructs inside a document, then junk: where each scanner resumes after them.
 "[false, true, null] x", "[NaN, 1] x", "[Infinity] x", "[-Infinity] x", "[1.5e3, -0.25E-2, 10, 0] x",
 "[\"a\\n\\u00e9\\\"b\\/\", \"c d\"] x", "\" \" x", "[\"\\u12\"]", "[\"\\u00e9x\"] x",
 "{\"a\": {\"b\": [1, {\"c\": null}]}} x", "[1e5x]", "[1.5.]", "[-]", "[tru]", "[fals]", "[nulx]",
 "[1, 2, 3,] ", "{\"a\":1 , \"b\" : [ ] } x", "[1.25]x", "[12e+3]x", "\"\\t\\r\\b\\f\" x",
 "\"\u001f\"", "[\"ab\u0000\"]", "{\"a\"\n:\n1}x",
 "[Nan]", "[Inf]", "[-Inf]", "[\"abcde\\uzzzz\"]", "[\"abcdef\\u12\"]", "[1ex]", "[1e+x]", "[{}, {}] x",
 "[\"abcdefgh\\u00e9\"] x",
]
out = []
for c in cases:
    b = c.encode("utf-8")
    row = {"input": c}
    try:
        json.loads(b); row["json"] = None
    except json.JSONDecodeError as e:
        row["json"] = [e.msg, e.pos]
    except Exception as e:
        row["json"] = ["OTHER " + type(e).__name__ + ": " + str(e), None]
    if orjson:
        try:
            orjson.loads(b); row["orjson"] = None
        except orjson.JSONDecodeError as e:
            row["orjson"] = [e.msg, e.pos]
    out.append(row)
print("[\n" + ",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in out) + "\n]")
