#!/usr/bin/env python3
"""Prints a release's request models as `sglang-mock` holds them (`mock-core/src/request/pydantic.rs`).

Run with the Python of an installed release (`python3 scripts/real_sglang.py install RELEASE` puts one under
target/real-sglang/RELEASE/venv):

    SGLANG_USE_CPU_ENGINE=1 target/real-sglang/0.5.23/venv/bin/python scripts/pydantic_models.py

It walks Pydantic's `core_schema` of each model FastAPI validates a body against and prints every field, in the
schema's order, with its type in Pydantic's own notation (the labels its union errors carry). Types whose values
a JSON body cannot fail (a union with `Any`, enums, bytes, nested dataclasses), and those the notation does not
hold (a constrained string, a validator that runs before the type), print as `any`; a constrained number prints as
`constrained-float` or `constrained-int`, its union label, without its bounds. The lines go into the release's
`generate_model` in `mock-core/src/release.rs`.
"""

import warnings

warnings.filterwarnings("ignore")

from pydantic import TypeAdapter  # noqa: E402


def notation(schema, defs):
    while schema["type"] == "definition-ref":
        schema = defs[schema["schema_ref"]]
    kind = schema["type"]
    if kind == "default":
        return notation(schema["schema"], defs)
    if kind in ("str", "int", "float", "bool", "any"):
        # A constrained number (`confloat(ge=0)`) is its type under its own union label (`constrained-float`); its
        # bounds are not kept, so only a value of another type fails. A constrained string (a `max_length`, a
        # `pattern`) is not held.
        constraints = {"ge", "gt", "le", "lt", "multiple_of", "min_length", "max_length", "pattern"}
        if not constraints & set(schema):
            return kind
        return f"constrained-{kind}" if kind in ("int", "float") else "any"
    if kind == "nullable":
        inner = notation(schema["schema"], defs)
        return "any" if inner == "any" else f"nullable[{inner}]"
    if kind == "list":
        return f"list[{notation(schema.get('items_schema', {'type': 'any'}), defs)}]"
    if kind == "dict":
        key = notation(schema.get("keys_schema", {"type": "any"}), defs)
        value = notation(schema.get("values_schema", {"type": "any"}), defs)
        return "any" if key not in ("str", "any") else f"dict[{key},{value}]"
    if kind == "model":
        # A nested model: only that the value is an object is checked, not its fields.
        return "model"
    if kind == "union":
        members = [notation(c[0] if isinstance(c, tuple) else c, defs) for c in schema["choices"]]
        # A model member's errors are labelled with its class name, which the notation does not keep.
        return "any" if "any" in members or "model" in members else f"union[{','.join(members)}]"
    if kind == "literal":
        return "literal[" + ",".join(repr(e) for e in schema["expected"]) + "]"
    if kind == "function-after":
        # The type is checked before the validator runs: a value of another type fails as the type's.
        return notation(schema["schema"], defs)
    if kind.startswith("function") and getattr(schema.get("function", {}).get("function"), "__name__", "") == (
        "validate_optional_list_i64_1d_2d"
    ):
        return "ids"
    return "any"


def fields(model):
    """The model's fields in order as (name, notation), a required field's notation marked with `!`."""
    schema = TypeAdapter(model).core_schema
    defs = {d["ref"]: d for d in schema.get("definitions", [])}
    while True:
        if schema["type"] == "definition-ref":
            schema = defs[schema["schema_ref"]]
        elif schema["type"] == "dataclass-args":
            return [(f["name"], ("" if f["schema"]["type"] == "default" else "!") + notation(f["schema"], defs))
                    for f in schema["fields"]]
        elif schema["type"] == "json-or-python":
            schema = schema["python_schema"]
        elif schema["type"] == "union":
            # A msgspec-style struct: `is-instance[Name]` or `function-after[build_struct(), Name]` over its fields.
            schema = schema["choices"][-1]
        elif schema["type"] == "typed-dict":
            return [(name, ("!" if f.get("required") else "") + notation(f["schema"], defs))
                    for name, f in schema["fields"].items()]
        elif schema["type"] == "model-fields":
            # A pydantic model (the OpenAI requests of `protocol.py`): a field without a default is required.
            return [(name, ("" if f["schema"]["type"] == "default" else "!") + notation(f["schema"], defs))
                    for name, f in schema["fields"].items()]
        else:
            schema = schema["schema"]


def main():
    from sglang.srt.managers.io_struct import GenerateReqInput

    print("generate_model")
    for name, ty in fields(GenerateReqInput):
        if ty != "any":
            print(f'        ("{name}", "{ty}"),')

    # The control routes' bodies, as (route, class, fields).
    import sglang.srt.managers.io_struct as io_struct

    print("control_models")
    for route, name in [("/update_weight_version", "UpdateWeightVersionReqInput"),
                        ("/pause_generation", "PauseGenerationReqInput"),
                        ("/continue_generation", "ContinueGenerationReqInput"),
                        ("/update_weights_from_disk", "UpdateWeightFromDiskReqInput"),
                        ("/abort_request", "AbortReq")]:
        model = getattr(io_struct, name, None)
        if model is None:
            continue
        listed = ", ".join(f'("{f}", "{t}")' for f, t in fields(model) if t not in ("any", "!any"))
        print(f'        ("{route}", "{name}", &[{listed}]),')

    # The endpoints, for the frame FastAPI writes into a validation error (`_extract_endpoint_context`: the source line
    # `inspect.getsourcelines` gives, the first decorator's, and the function's name), read from the source.
    import ast
    import os

    import sglang

    entrypoints = os.path.join(os.path.dirname(sglang.__file__), "srt", "entrypoints")
    print("validation_endpoints")
    # `http_server.py`'s `app` routes, then `/v1/loads`, whose `router` has a module of its own (0.5.15 and later).
    for name, owner in (("http_server.py", "app"), ("v1_loads.py", "router")):
        source = os.path.join(entrypoints, name)
        if not os.path.exists(source):
            continue
        for node in ast.parse(open(source, encoding="utf-8").read()).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.decorator_list:
                continue
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                        and isinstance(decorator.func.value, ast.Name) and decorator.func.value.id == owner
                        and decorator.args and isinstance(decorator.args[0], ast.Constant)):
                    line = node.decorator_list[0].lineno
                    print(f'        ("{decorator.args[0].value}", "{node.name}", {line}),')


if __name__ == "__main__":
    main()
