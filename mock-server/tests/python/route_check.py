"""Checks that sglang-mock serves every HTTP route of an SGLang release, less the documented exclusions.

The release's routes are read from its wheel, without importing sglang: the file
`sglang/srt/entrypoints/http_server.py` is parsed with `ast`, and every registration on the FastAPI app is
collected:

- decorators `@app.get/post/put/delete/patch/head/options(path)`, `@app.api_route(path, methods=[...])`,
  `@app.route(...)` and `@app.websocket(path)`;
- calls `app.add_api_route(path, ...)`, `app.add_route(...)`, `app.add_websocket_route(...)` and
  `app.mount(path, ...)`;
- `app.include_router(router)`: the router's own decorators, in the module it is imported from, with the
  router's and the call's `prefix`;
- functions of the wheel called with the app as an argument (such as `add_prometheus_middleware(app)`), read
  the same way, including `app.routes.append(Mount(path, ...))`.

A path is a string, a module-level name bound to one, or `os.environ.get(NAME, default)` (the default; with no
default the route exists only when NAME is set, and is left out). Routes registered under an `if` are kept,
and `--list` notes their condition on stderr.

A route is served when the mock's answer to that method on that path (path parameters filled with plausible
values, a JSON body `{}` for POST, PUT and PATCH) is neither a 404 with body `{"detail":"Not Found"}` (any 404
for HEAD, which has no body) nor a 405; a WebSocket route is probed with an upgrade request. Routes that
change the server's state for later requests are probed last, each followed by the call that undoes it
(`/pause_generation` by `/continue_generation`, and so on).

With `--api-key` (and, from 0.5.15, `--admin-api-key`), naming the keys the mock was started with, the
check probes every checked route without a key, with the API key and with the admin key instead, and
requires the mock to refuse (401 `{"error":"Unauthorized"}`) exactly where the release would: the decision is
the wheel's own `decide_request_auth` (`sglang/srt/utils/auth.py`, executed from the wheel) with the route's
`@auth_level` read from its decorators; 0.5.3 has no `auth.py`, and its rule is `add_api_key_middleware` in
`srt/utils/common.py`, transcribed below.

Usage:
    route_check.py --wheel WHEEL --url http://127.0.0.1:PORT \
        --exclusions mock-server/tests/data/route_exclusions.json [--api-key K [--admin-api-key A]]
    route_check.py --wheel WHEEL --list
"""

import argparse
import ast
import email.parser
import json
import re
import sys
import types
import zipfile
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set, Tuple

import requests

SERVER_MODULE = "sglang.srt.entrypoints.http_server"
HTTP_METHODS = ("get", "post", "put", "delete", "patch", "head", "options")
WEBSOCKET = "WEBSOCKET"

# Routes the mock must serve in every release that has them; an exclusion may not name one.
MUST_SERVE = {
    "/generate",
    "/health",
    "/health_generate",
    "/ready",
    "/v1/loads",
    "/model_info",
    "/get_model_info",
    "/server_info",
    "/get_server_info",
    "/get_load",
    "/get_weight_version",
    "/begin_weight_update",
    "/end_weight_update",
    "/update_weights_from_ipc",
    "/update_weights_from_disk",
    "/pause_generation",
    "/continue_generation",
    "/abort_request",
    "/flush_cache",
    "/metrics",
    "/tokenize",
    "/detokenize",
    "/v1/tokenize",
    "/v1/detokenize",
    "/v1/models",
    "/v1/completions",
    "/v1/chat/completions",
}

# A probe of the key changes what the server does for later requests; the value is the call that undoes it.
UNDO = {
    "/pause_generation": ("POST", "/continue_generation", {}),
    "/begin_weight_update": ("POST", "/end_weight_update", {}),
    "/release_memory_occupation": ("POST", "/resume_memory_occupation", {}),
    "/start_profile": ("POST", "/stop_profile", {}),
    "/start_expert_distribution_record": ("POST", "/stop_expert_distribution_record", {}),
    "/slow_down": ("POST", "/slow_down", {"forward_sleep_time": None}),
}

PATH_PARAMETER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[A-Za-z_]+)?\}")
PARAMETER_VALUES = {"response_id": "resp_route_check", "method": "route_check"}


class RouteSourceError(Exception):
    """A registration whose path or methods this reader cannot work out from the source."""


@dataclass(frozen=True)
class Route:
    """One (method, path) the release registers, with where and under which condition."""

    method: str
    path: str
    origin: str
    condition: str = ""


class _Module:
    """A parsed module of the wheel: top-level assignments and the names it imports from other modules."""

    def __init__(self, name: str, path: str, source: bytes):
        self.name = name
        self.path = path
        self.tree = ast.parse(source, path)
        self.parents: Dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.assignments: Dict[str, ast.expr] = {}
        self.functions: Dict[str, ast.AST] = {}
        self.imports: Dict[str, Tuple[str, str]] = {}
        self.star_imports: List[str] = []
        package = name if path.endswith("/__init__.py") else name.rpartition(".")[0]
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and self._top_level(node):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assignments[target.id] = node.value
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._top_level(node):
                self.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                source = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    if alias.name == "*":
                        self.star_imports.append(source)
                    else:
                        self.imports[alias.asname or alias.name] = (source, alias.name)

    def _top_level(self, node: ast.AST) -> bool:
        """Not inside a function or class (an `if` or `try` at module level still counts)."""
        parent = self.parents.get(node)
        while parent is not None:
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                return False
            parent = self.parents.get(parent)
        return True

    def line(self, node: ast.AST) -> str:
        return f"{self.path.split('sglang/', 1)[-1]}:{node.lineno}"

    def condition(self, node: ast.AST) -> List[str]:
        """The `if` tests that guard a node, outermost first."""
        guards = []
        child, parent = node, self.parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.If) and child is not parent.test:
                test = ast.unparse(parent.test)
                guards.append(test if child in parent.body else f"not ({test})")
            child, parent = parent, self.parents.get(parent)
        return guards[::-1]


class RouteReader:
    """Reads the route table of a release from its wheel."""

    def __init__(self, wheel: zipfile.ZipFile):
        self._wheel = wheel
        self._files = set(wheel.namelist())
        self._modules: Dict[str, _Module] = {}
        # The helper functions being read, so a recursive one is read once.
        self._scanning: Set[Tuple[str, str]] = set()
        self.notes: List[str] = []

    def module(self, name: str) -> Optional[_Module]:
        """The wheel's module `name`, or None when the wheel has no such file."""
        if name not in self._modules:
            base = name.replace(".", "/")
            path = next((p for p in (f"{base}.py", f"{base}/__init__.py") if p in self._files), None)
            if path is None:
                return None
            self._modules[name] = _Module(name, path, self._wheel.read(path))
        return self._modules[name]

    def routes(self) -> Dict[Tuple[str, str], Route]:
        """Every (method, path) of the release's HTTP server, with the first place that registers it."""
        server = self.module(SERVER_MODULE)
        if server is None:
            raise RouteSourceError(f"the wheel has no {SERVER_MODULE}")
        apps = {
            name
            for name, value in server.assignments.items()
            if isinstance(value, ast.Call) and _callee(value) == "FastAPI"
        }
        table: Dict[Tuple[str, str], Route] = {}
        for route in self._scan(server, server.tree, apps, prefix="", via="", guards=[]):
            key = (route.method, route.path)
            first = table.setdefault(key, route)
            if first is not route and first.condition:
                # Registered in more than one place: it exists when any of them runs.
                either = f"({first.condition}) or ({route.condition})" if route.condition else ""
                table[key] = Route(first.method, first.path, first.origin, either)
        return table

    def _scan(
        self, module: _Module, scope: ast.AST, owners: Set[str], prefix: str, via: str, guards: List[str]
    ) -> Iterator[Route]:
        """The routes registered on the objects named `owners` within `scope` of `module`."""
        for node in ast.walk(scope):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call) and _owner(decorator.func) in owners:
                        yield from self._decorated(module, decorator, prefix, via, guards)
            elif isinstance(node, ast.Call):
                if _owner(node.func) in owners:
                    yield from self._called(module, node, prefix, via, guards)
                elif _is_routes_append(node, owners):
                    yield from self._appended(module, node, scope, prefix, via, guards)
                elif isinstance(node.func, ast.Name):
                    yield from self._helper(module, node, owners, prefix, guards)

    def _route(
        self, module: _Module, node: ast.AST, method: str, path: str, prefix: str, via: str, guards: List[str]
    ) -> Route:
        condition = " and ".join(guards + module.condition(node))
        return Route(method, prefix + path, module.line(node) + via, condition)

    def _decorated(
        self, module: _Module, call: ast.Call, prefix: str, via: str, guards: List[str]
    ) -> Iterator[Route]:
        kind = call.func.attr
        if kind in HTTP_METHODS:
            methods = [kind.upper()]
        elif kind in ("api_route", "route"):
            methods = _methods(module, call, default=["GET"])
        elif kind in ("websocket", "websocket_route"):
            methods = [WEBSOCKET]
        else:
            return  # middleware, exception_handler, on_event: not routes
        path = self._path(module, _argument(call, 0, "path"))
        if path is None:
            return
        for method in methods:
            yield self._route(module, call, method, path, prefix, via, guards)

    def _called(
        self, module: _Module, call: ast.Call, prefix: str, via: str, guards: List[str]
    ) -> Iterator[Route]:
        kind = call.func.attr
        if kind in ("add_api_route", "add_route"):
            methods = _methods(module, call, default=["GET"])
        elif kind == "add_websocket_route":
            methods = [WEBSOCKET]
        elif kind == "mount":
            methods = ["GET"]
        elif kind == "include_router":
            yield from self._included(module, call, prefix, guards)
            return
        else:
            return
        path = self._path(module, _argument(call, 0, "path"))
        if path is not None:
            for method in methods:
                yield self._route(module, call, method, path, prefix, via, guards)

    def _included(self, module: _Module, call: ast.Call, prefix: str, guards: List[str]) -> Iterator[Route]:
        """`app.include_router(router, prefix=...)`: the router's routes, from the module that defines it."""
        router = _argument(call, 0, "router")
        if not isinstance(router, ast.Name):
            raise RouteSourceError(f"{module.line(call)}: include_router of {ast.unparse(router)}")
        source, name = module.imports.get(router.id, (module.name, router.id))
        defining = self.module(source)
        if defining is None or name not in defining.assignments:
            raise RouteSourceError(f"{module.line(call)}: cannot find router {router.id} in {source}")
        full = prefix
        for owner, node in (
            (module, _keyword(call, "prefix")),
            (defining, _keyword(defining.assignments[name], "prefix")),
        ):
            if node is not None:
                full += self._path(owner, node) or ""
        guards = guards + module.condition(call)
        self.notes.append(f"include_router({router.id}) at {module.line(call)}: routes of {defining.path}")
        yield from self._scan(
            defining, defining.tree, {name}, full, f" (via include_router at {module.line(call)})", guards
        )

    def _appended(
        self, module: _Module, call: ast.Call, scope: ast.AST, prefix: str, via: str, guards: List[str]
    ) -> Iterator[Route]:
        """`app.routes.append(Mount(path, ...))`, the Mount given directly or through a local name."""
        value = call.args[0] if call.args else None
        if isinstance(value, ast.Name):
            value = next(
                (
                    n.value
                    for n in ast.walk(scope)
                    if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)
                ),
                None,
            )
        if not (
            isinstance(value, ast.Call) and _callee(value) in ("Mount", "Route", "APIRoute", "WebSocketRoute")
        ):
            raise RouteSourceError(f"{module.line(call)}: routes.append of {ast.unparse(call.args[0])}")
        methods = (
            [WEBSOCKET] if _callee(value) == "WebSocketRoute" else _methods(module, value, default=["GET"])
        )
        path = self._path(module, _argument(value, 0, "path"))
        if path is not None:
            for method in methods:
                yield self._route(module, call, method, path, prefix, via, guards)

    def _helper(
        self, module: _Module, call: ast.Call, owners: Set[str], prefix: str, guards: List[str]
    ) -> Iterator[Route]:
        """A function of the wheel called with the app as a positional argument: its registrations on it."""
        positions = [i for i, a in enumerate(call.args) if isinstance(a, ast.Name) and a.id in owners]
        if not positions:
            return
        found_at = self._function(module, call.func.id)
        if found_at is None or (found_at[0].name, found_at[1]) in self._scanning:
            return
        defining, name = found_at
        function = defining.functions[name]
        self._scanning.add((defining.name, name))
        parameters = [a.arg for a in function.args.posonlyargs + function.args.args]
        inner = {parameters[i] for i in positions if i < len(parameters)}
        found = list(
            self._scan(
                defining,
                function,
                inner,
                prefix,
                f" (via {name}() at {module.line(call)})",
                guards + module.condition(call),
            )
        )
        self._scanning.discard((defining.name, name))
        if found:
            self.notes.append(
                f"{name}(app) at {module.line(call)} registers {len(found)} route(s) in {defining.path}"
            )
        yield from found

    def _function(self, module: _Module, name: str, depth: int = 0) -> Optional[Tuple[_Module, str]]:
        """Where the function `name` of `module` is defined in the wheel, following imports (star imports
        too, as `sglang.srt.utils` re-exports `utils.common`); None for a function from outside sglang."""
        if name in module.functions:
            return module, name
        if depth > 8:
            return None
        if name in module.imports:
            candidates = [module.imports[name]]
        else:
            candidates = [(source, name) for source in module.star_imports]
        for source, original in candidates:
            defining = self.module(source) if source.split(".")[0] == "sglang" else None
            if defining is not None:
                found = self._function(defining, original, depth + 1)
                if found is not None:
                    return found
        return None

    def _path(self, module: _Module, node: Optional[ast.expr]) -> Optional[str]:
        """A route path: a string, a module-level name bound to one, or `os.environ.get(NAME[, default])`;
        None when the route exists only if an environment variable is set."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in module.assignments:
            return self._path(module, module.assignments[node.id])
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv"):
            variable = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else "?"
            if len(node.args) < 2:
                self.notes.append(
                    f"{module.line(node)}: a route registered only when {variable} is set (left out)"
                )
                return None
            default = self._path(module, node.args[1])
            self.notes.append(f"{module.line(node)}: path {default} unless {variable} is set")
            return default
        raise RouteSourceError(f"{module.line(node)}: cannot read the route path {ast.unparse(node)}")


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _owner(func: ast.expr) -> Optional[str]:
    """`x` of a call `x.method(...)`."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id
    return None


def _is_routes_append(call: ast.Call, owners: Set[str]) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "append"
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "routes"
        and _owner(func.value) in owners
    )


def _argument(call: ast.Call, position: int, keyword: str) -> Optional[ast.expr]:
    if len(call.args) > position:
        return call.args[position]
    return _keyword(call, keyword)


def _keyword(call: ast.expr, keyword: str) -> Optional[ast.expr]:
    if isinstance(call, ast.Call):
        return next((k.value for k in call.keywords if k.arg == keyword), None)
    return None


def _methods(module: _Module, call: ast.Call, default: List[str]) -> List[str]:
    node = _keyword(call, "methods")
    if node is None:
        return default
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return [e.value.upper() for e in node.elts]
    raise RouteSourceError(f"{module.line(call)}: cannot read methods={ast.unparse(node)}")


def wheel_version(wheel: zipfile.ZipFile) -> str:
    """The release number from the wheel's METADATA."""
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return email.parser.HeaderParser().parsestr(wheel.read(metadata).decode())["Version"]


# ---- exclusions ----


@dataclass(frozen=True)
class Exclusion:
    """A route outside the mock's scope: a path, optionally only some methods, and why."""

    path: str
    methods: Optional[Tuple[str, ...]]
    reason: str

    def covers(self, method: str, path: str) -> bool:
        return path == self.path and (self.methods is None or method in self.methods)


def load_exclusions(path: str, version: str) -> List[Exclusion]:
    """The exclusions for one release: those under "*" and those under its version."""
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    out = []
    for key in ("*", version):
        for entry in document.get(key, []):
            methods = entry.get("methods")
            out.append(
                Exclusion(
                    entry["path"], tuple(m.upper() for m in methods) if methods else None, entry["reason"]
                )
            )
    return out


# ---- probing ----


def fill_parameters(path: str, model: str) -> str:
    """The path with each `{name}` or `{name:converter}` replaced by a plausible value."""
    return PATH_PARAMETER.sub(
        lambda m: model if m.group(1) == "model" else PARAMETER_VALUES.get(m.group(1), "x"), path
    )


def served_model(session: requests.Session, url: str, timeout: float) -> str:
    """The model id /v1/models lists first, so `{model}` names a model the server knows."""
    try:
        return session.get(f"{url}/v1/models", timeout=timeout).json()["data"][0]["id"]
    except (requests.RequestException, ValueError, KeyError, IndexError, TypeError):
        return "default"


def probe(
    session: requests.Session, url: str, method: str, path: str, timeout: float, auth: Optional[str] = None
) -> Tuple[bool, str]:
    """Whether the server serves `method path`, and what it answered; `auth` is an `Authorization` header."""
    headers = {} if auth is None else {"Authorization": auth}
    kwargs = {}
    if method == WEBSOCKET:
        method = "GET"
        headers = {
            **headers,
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "cm91dGUtY2hlY2sgcHJvYmU=",
        }
    elif method in ("POST", "PUT", "PATCH"):
        kwargs["json"] = {}
    try:
        with session.request(
            method, url + path, headers=headers, timeout=timeout, stream=True, **kwargs
        ) as response:
            status = response.status_code
            if status == 405:
                return False, "405"
            if status == 404 and method == "HEAD":
                return False, "404 (HEAD: no body)"
            if status == 404:
                body = response.raw.read(4096, decode_content=True)
                try:
                    if json.loads(body) == {"detail": "Not Found"}:
                        return False, '404 {"detail":"Not Found"}'
                except ValueError:
                    pass
            return True, str(status)
    except requests.RequestException as e:
        return False, f"no answer ({type(e).__name__})"


def probe_any(url: str, path: str, timeout: float) -> Optional[str]:
    """The method, if any, with which the server serves `path` (GET or POST)."""
    session = requests.Session()
    for method in ("GET", "POST"):
        ok, _ = probe(session, url, method, path, timeout)
        if ok:
            return method
    return None


def check_served(url: str, routes: List[Route], timeout: float) -> List[Tuple[Route, str]]:
    """Probes each route (the ones that change later answers last, each followed by its undo); the routes
    not served, with what the server answered."""
    session = requests.Session()
    model = served_model(session, url, timeout)
    ordered = sorted(routes, key=lambda r: (r.path in UNDO, r.path, r.method))
    missing = []
    for route in ordered:
        ok, answer = probe(session, url, route.method, fill_parameters(route.path, model), timeout)
        if not ok:
            missing.append((route, answer))
        undo = UNDO.get(route.path)
        if undo is not None:
            method, path, body = undo
            try:
                session.request(method, url + path, json=body, timeout=timeout).close()
            except requests.RequestException:
                pass
    return missing


# ---- the API-key middleware ----


def auth_levels(wheel: zipfile.ZipFile) -> Dict[str, str]:
    """`path -> level` for every route function of `http_server.py` marked `@auth_level(AuthLevel.X)`."""
    source = wheel.read(SERVER_MODULE.replace(".", "/") + ".py")
    levels = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        level = None
        paths = []
        for decorator in node.decorator_list:
            if not isinstance(decorator, ast.Call):
                continue
            if isinstance(decorator.func, ast.Name) and decorator.func.id == "auth_level":
                level = ast.unparse(decorator.args[0]).rsplit(".", 1)[-1]
            elif _owner(decorator.func) == "app" and decorator.args and isinstance(decorator.args[0], ast.Constant):
                paths.append(decorator.args[0].value)
        for path in paths:
            levels[path] = level or "NORMAL"
    return levels


def release_auth(wheel: zipfile.ZipFile):
    """The release's decision `allowed(method, path, header, api_key, admin_api_key, level) -> bool`."""
    try:
        source = wheel.read("sglang/srt/utils/auth.py")
    except KeyError:
        # 0.5.3's `add_api_key_middleware` (`srt/utils/common.py`): one key, every route but the exempt ones.
        def allowed_0_5_3(method, path, header, api_key, admin_api_key, level):
            if method == "OPTIONS" or path.startswith("/health") or path.startswith("/metrics"):
                return True
            return header == "Bearer " + api_key

        return allowed_0_5_3
    # A module of its own (its dataclasses look themselves up in `sys.modules`), apart from any installed sglang.
    module = types.ModuleType("release_auth")
    sys.modules[module.__name__] = module
    exec(compile(source, "sglang/srt/utils/auth.py", "exec"), module.__dict__)
    level_type = module.AuthLevel
    decide = module.decide_request_auth

    def allowed(method, path, header, api_key, admin_api_key, level):
        return decide(
            method=method,
            path=path,
            authorization_header=header,
            api_key=api_key,
            admin_api_key=admin_api_key,
            auth_level=level_type[level],
        ).allowed

    return allowed


def check_auth(
    url: str, routes: List[Route], levels: Dict[str, str], allowed, api_key: str, admin_api_key: Optional[str],
    timeout: float,
) -> Tuple[int, List[str]]:
    """Probes each route with no key, the API key and the admin key; the probes and the disagreements."""
    session = requests.Session()
    headers = [None, f"Bearer {api_key}"] + ([f"bearer {admin_api_key}"] if admin_api_key else [])
    ordered = sorted(routes, key=lambda r: (r.path in UNDO, r.path, r.method))
    wrong = []
    probes = 0
    for route in ordered:
        level = levels.get(route.path, "NORMAL")
        method = "GET" if route.method == WEBSOCKET else route.method
        for header in headers:
            want = allowed(method, route.path, header, api_key, admin_api_key, level)
            path = fill_parameters(route.path, "default")
            try:
                with session.request(
                    method, url + path, headers={} if header is None else {"Authorization": header},
                    json={} if method in ("POST", "PUT", "PATCH") else None, timeout=timeout, stream=True,
                ) as response:
                    body = response.raw.read(4096, decode_content=True)
                    # A HEAD answer has no body.
                    refused = response.status_code == 401 and (
                        method == "HEAD" or body == b'{"error":"Unauthorized"}'
                    )
            except requests.RequestException as e:
                wrong.append(f"{route.method} {route.path} with {header!r}: no answer ({type(e).__name__})")
                continue
            probes += 1
            if refused == want:
                wrong.append(
                    f"{route.method} {route.path} ({level}) with {header!r}: "
                    f"{'refused' if refused else 'allowed'}, the release {'allows' if want else 'refuses'} it"
                )
            undo = UNDO.get(route.path)
            if undo is not None and not refused:
                undo_method, undo_path, undo_body = undo
                session.request(
                    undo_method, url + undo_path, json=undo_body, timeout=timeout,
                    headers={} if header is None else {"Authorization": header},
                ).close()
    return probes, wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", required=True, help="an SGLang wheel (read with zipfile)")
    parser.add_argument("--url", help="the server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--exclusions", help="the JSON file of routes outside the mock's scope")
    parser.add_argument("--list", action="store_true", help="print the release's route table and exit")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each answer")
    parser.add_argument("--api-key", help="the mock's --api-key: check the API-key middleware instead")
    parser.add_argument("--admin-api-key", help="the mock's --admin-api-key (0.5.15 and later)")
    args = parser.parse_args()
    if not args.list and not (args.url and args.exclusions):
        parser.error("--url and --exclusions are required unless --list")

    with zipfile.ZipFile(args.wheel) as wheel:
        version = wheel_version(wheel)
        reader = RouteReader(wheel)
        try:
            table = reader.routes()
        except RouteSourceError as e:
            print(f"{args.wheel}: {e}", file=sys.stderr)
            return 2
    routes = sorted(table.values(), key=lambda r: (r.path, r.method))

    if args.list:
        for route in routes:
            print(f"{route.method} {route.path}")
        print(f"# {len(routes)} routes in {version}", file=sys.stderr)
        for note in reader.notes:
            print(f"# {note}", file=sys.stderr)
        for route in routes:
            if route.condition:
                print(
                    f"# {route.method} {route.path} only if {route.condition} ({route.origin})",
                    file=sys.stderr,
                )
        return 0

    exclusions = load_exclusions(args.exclusions, version)
    forbidden = sorted({e.path for e in exclusions if e.path in MUST_SERVE})
    if forbidden:
        print(
            f"{args.exclusions} excludes routes the mock must serve: {', '.join(forbidden)}", file=sys.stderr
        )
        return 2
    for exclusion in exclusions:
        if not any(exclusion.covers(r.method, r.path) for r in routes):
            methods = ",".join(exclusion.methods or ("any method",))
            print(f"note: the exclusion of {exclusion.path} ({methods}) matches no route of {version}")
    checked = [r for r in routes if not any(e.covers(r.method, r.path) for e in exclusions)]
    if args.api_key:
        with zipfile.ZipFile(args.wheel) as wheel:
            levels = auth_levels(wheel)
            allowed = release_auth(wheel)
        probes, wrong = check_auth(
            args.url.rstrip("/"), checked, levels, allowed, args.api_key, args.admin_api_key, args.timeout
        )
        for line in wrong:
            print(f"auth: {line}")
        print(f"auth ({version}): {probes} probes of {len(checked)} routes, {len(wrong)} disagree")
        return 1 if wrong or probes == 0 else 0
    missing = check_served(args.url.rstrip("/"), checked, args.timeout)
    for route, answer in sorted(missing, key=lambda m: (m[0].path, m[0].method)):
        print(f"missing: {route.method} {route.path} ({route.origin}): {answer}")
    # The routes this check requires of some release must be absent from a release that lacks them: a client
    # written against 0.5.23 must not pass its tests on `/get_weight_version`.
    in_release = {r.path for r in routes}
    absent = [Route("GET", path, "not in this release") for path in sorted(MUST_SERVE - in_release)]
    extra = [r for r in absent if probe_any(args.url.rstrip("/"), r.path, args.timeout)]
    for route in extra:
        print(f"served but not in {version}: {route.path}")
    excluded = len(routes) - len(checked)
    served = len(checked) - len(missing)
    print(
        f"routes ({version}): {len(routes)} in the release, {excluded} excluded, {served} served; "
        f"{len(absent) - len(extra)} of {len(absent)} checked routes the release lacks are absent"
    )
    return 1 if missing or extra else 0


if __name__ == "__main__":
    sys.exit(main())
