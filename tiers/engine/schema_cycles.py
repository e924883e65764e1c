"""Recursive JSON schemas that no finite JSON value can match, found before a grammar is built.

`{"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}` asks for an object that contains
itself: every value must go one level deeper, so no output can ever end. A grammar library compiles it, then gives
up mid-generation. Recursion with a way out (an optional property, an `anyOf` branch without the `$ref`, an
array that may be empty) is fine and left to the grammar.

The check is the least fixed point of "this schema has a finite instance" over the `$ref` targets, resolved as
the grammar library resolves them (schema_refs: `$id`s, anchors, encoded pointers): every target starts as
empty, and one becomes inhabited once its schema is satisfiable given the targets found inhabited so far.
Targets still empty at the end, and reached from the root, form the cycle the error names. A required property's
value must satisfy its `properties` schema and every `patternProperties` schema whose pattern matches its name
(`additionalProperties` when none applies). Keywords the check does not model count as satisfiable, and so does a
pattern it cannot read for sure (one Python cannot compile, or a name outside printable ASCII, where regex
dialects differ), so it never refuses a schema that has an instance.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any

import regex

from tiers.engine.schema_refs import JsonSchema, SchemaGraph, schema_graph

MAX_DEPTH = 128  # inline nesting of schema objects the check walks; a deeper schema is refused
MATCH_BUDGET_S = 0.2  # regex matching time for one check (catastrophic backtracking stops there); then "unsure"
MAX_MATCHES = 10_000  # (pattern, name) pairs one check matches; the rest are unsure


class SchemaTooDeepError(ValueError):
    pass


def empty_ref_cycle(root: JsonSchema, graph: SchemaGraph | None = None) -> list[str] | None:
    """The `$ref` cycle (the references as written, the first one repeated at the end) that leaves `root` without
    any finite instance, or None when the root has one (or has no `$ref`). SchemaTooDeepError past MAX_DEPTH.
    `graph`: schema_graph(root), when the caller has it."""
    graph = graph if graph is not None else schema_graph(root)
    targets = graph.targets()
    if not targets:
        return None
    check = _Satisfiable(graph, {key: False for key in targets})
    dependents: dict[int, list[int]] = {key: [] for key in targets}
    for key, (_, target) in targets.items():
        for used in graph.targets_in(target):
            dependents[used].append(key)
    queue, queued = deque(targets), set(targets)
    while queue:  # a target is checked again only when one it refers to became inhabited
        key = queue.popleft()
        queued.discard(key)
        if not check.inhabited[key] and check(targets[key][1], 0):
            check.inhabited[key] = True
            waiting = [d for d in dependents[key] if not check.inhabited[d] and d not in queued]
            queue.extend(waiting)
            queued.update(waiting)
    if check(root, 0):
        return None
    empty = {key for key, ok in check.inhabited.items() if not ok}
    return _cycle(root, graph, empty)


class _Satisfiable:
    def __init__(self, graph: SchemaGraph, inhabited: dict[int, bool]) -> None:
        self.graph, self.inhabited = graph, inhabited
        self.patterns = _Patterns()

    def __call__(self, schema: Any, depth: int) -> bool:
        if depth > MAX_DEPTH:
            raise SchemaTooDeepError(f"the schema nests deeper than {MAX_DEPTH} levels")
        if schema is False:
            return False
        if not isinstance(schema, dict):
            return True
        ref = self.graph.ref(schema)
        if ref is not None and (ref.target is False
                                or isinstance(ref.target, dict) and not self.inhabited[id(ref.target)]):
            return False
        if "const" in schema or "enum" in schema:
            return schema.get("enum") != []
        deeper = depth + 1
        if any(not self(s, deeper) for s in _list(schema.get("allOf"))):
            return False
        for key in ("anyOf", "oneOf"):
            branches = _list(schema.get(key))
            if branches and not any(self(s, deeper) for s in branches):
                return False
        types = schema.get("type")
        if types is None:
            return True
        kinds = types if isinstance(types, list) else [types]
        return any(self._kind(kind, schema, deeper) for kind in kinds)

    def _kind(self, kind: Any, schema: dict, depth: int) -> bool:
        if kind == "object":
            return all(self(s, depth) for name in _list(schema.get("required")) if isinstance(name, str)
                       for s in self._property_schemas(schema, name))
        if kind == "array":
            min_items = schema.get("minItems", 0)
            if not isinstance(min_items, int) or min_items <= 0:
                return True
            prefix = _list(schema.get("prefixItems"))
            rest = schema.get("items", True)
            needed = prefix[:min_items] + ([rest] if min_items > len(prefix) else [])
            return all(self(s, depth) for s in needed)
        return True

    def _property_schemas(self, schema: dict, name: str) -> list[Any]:
        """The schemas the value of property `name` surely has to match."""
        properties = _dict(schema.get("properties"))
        found = [properties[name]] if name in properties else []
        unsure = False
        for pattern, sub in _dict(schema.get("patternProperties")).items():
            matches = self.patterns.search(pattern, name)
            unsure = unsure or matches is None
            if matches:
                found.append(sub)
        if not found and not unsure:
            found.append(schema.get("additionalProperties", True))
        return found


class _Patterns:
    """Whether a `patternProperties` regex finds a match in a property name: True, False, or None when that is not
    sure (a regex Python cannot compile, a name outside printable ASCII, or the check's matching budget spent)."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + MATCH_BUDGET_S
        self.known: dict[tuple[str, str], bool | None] = {}

    def search(self, pattern: Any, name: str) -> bool | None:
        if not isinstance(pattern, str) or not (name.isascii() and name.isprintable()):
            return None
        key = (pattern, name)
        if key not in self.known:
            self.known[key] = self._search(pattern, name) if len(self.known) < MAX_MATCHES else None
        return self.known[key]

    def _search(self, pattern: str, name: str) -> bool | None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            return regex.search(pattern, name, timeout=left) is not None
        except (regex.error, TimeoutError, RecursionError, OverflowError, ValueError):
            return None


def _cycle(root: JsonSchema, graph: SchemaGraph, empty: set[int]) -> list[str]:
    """A path of empty targets from the root back to one already on it, named by the `$ref`s written to them."""
    targets = graph.targets()
    labels = {key: written for key, (written, _) in targets.items()}
    labels.setdefault(id(root), "#")
    schemas: dict[int, JsonSchema] = {key: target for key, (_, target) in targets.items()}
    schemas.setdefault(id(root), root)
    path: list[int] = []
    key = id(root)
    while key not in path:
        path.append(key)
        following = [t for t in graph.targets_in(schemas[key]) if t in empty]
        if not following:
            return [labels[k] for k in path]
        key = following[0]
    return [labels[k] for k in path[path.index(key):]] + [labels[key]]


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}
