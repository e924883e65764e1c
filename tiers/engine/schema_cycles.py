"""Recursive JSON schemas that no finite JSON value can match, found before a grammar is built.

`{"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}` asks for an object that contains
itself: every value must go one level deeper, so no output can ever end. A grammar library compiles it, then gives
up mid-generation. Recursion with a way out (an optional property, an `anyOf` branch without the `$ref`, an
array that may be empty) is fine and left to the grammar.

The check is the least fixed point of "this schema has a finite instance" over the `$ref` targets: every target
starts as empty, and one becomes inhabited once its schema is satisfiable given the targets found inhabited so far.
Targets still empty at the end, and reached from the root, form the cycle the error names. Keywords the check does
not model count as satisfiable, so it never refuses a schema that has an instance.
"""
from __future__ import annotations

from typing import Any

MAX_DEPTH = 128  # nesting of schema objects the check walks; a deeper schema is refused

JsonSchema = dict[str, Any] | bool


class SchemaTooDeepError(ValueError):
    pass


def empty_ref_cycle(root: JsonSchema) -> list[str] | None:
    """The `$ref` cycle (a list of references, the first one repeated at the end) that leaves `root` without any
    finite instance, or None when the root has one (or has no local `$ref`). SchemaTooDeepError past MAX_DEPTH."""
    targets = _local_refs(root)
    if not targets:
        return None
    inhabited: dict[str, bool] = {ref: False for ref in targets}
    changed = True
    while changed:
        changed = False
        for ref, target in targets.items():
            if not inhabited[ref] and _satisfiable(target, inhabited, 0):
                inhabited[ref] = changed = True
    if _satisfiable(root, inhabited, 0):
        return None
    empty = {ref for ref, ok in inhabited.items() if not ok}
    return _cycle("#", {"#": root, **targets}, empty)


def _satisfiable(schema: Any, inhabited: dict[str, bool], depth: int) -> bool:
    if depth > MAX_DEPTH:
        raise SchemaTooDeepError(f"the schema nests deeper than {MAX_DEPTH} levels")
    if schema is False:
        return False
    if not isinstance(schema, dict):
        return True
    ref = schema.get("$ref")
    if isinstance(ref, str) and not inhabited.get(ref, True):
        return False
    if "const" in schema or "enum" in schema:
        return schema.get("enum") != []
    deeper = depth + 1
    if any(not _satisfiable(s, inhabited, deeper) for s in _list(schema.get("allOf"))):
        return False
    for key in ("anyOf", "oneOf"):
        branches = _list(schema.get(key))
        if branches and not any(_satisfiable(s, inhabited, deeper) for s in branches):
            return False
    types = schema.get("type")
    if types is None:
        return True
    kinds = types if isinstance(types, list) else [types]
    return any(_kind_satisfiable(kind, schema, inhabited, deeper) for kind in kinds)


def _kind_satisfiable(kind: Any, schema: dict, inhabited: dict[str, bool], depth: int) -> bool:
    if kind == "object":
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        extra = schema.get("additionalProperties", True)
        return all(_satisfiable(properties.get(name, extra), inhabited, depth)
                   for name in _list(schema.get("required")) if isinstance(name, str))
    if kind == "array":
        min_items = schema.get("minItems", 0)
        if not isinstance(min_items, int) or min_items <= 0:
            return True
        prefix = _list(schema.get("prefixItems"))
        rest = schema.get("items", True)
        needed = prefix[:min_items] + ([rest] if min_items > len(prefix) else [])
        return all(_satisfiable(s, inhabited, depth) for s in needed)
    return True


def _local_refs(root: JsonSchema) -> dict[str, JsonSchema]:
    """Every local `$ref` ("#", "#/$defs/A", any JSON pointer into the document) that resolves, with its target."""
    found: dict[str, JsonSchema] = {}
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaTooDeepError(f"the schema nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#") and ref not in found:
                target = _resolve(root, ref)
                if target is not None:
                    found[ref] = target
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            stack.extend((value, depth + 1) for value in node)
    return found


def _resolve(root: JsonSchema, ref: str) -> JsonSchema | None:
    node: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node if isinstance(node, (dict, bool)) else None


def _cycle(start: str, schemas: dict[str, JsonSchema], empty: set[str]) -> list[str]:
    """A path of empty references from `start` back to one already on it."""
    path: list[str] = []
    node = start
    while node not in path:
        path.append(node)
        following = [ref for ref in _refs_in(schemas[node]) if ref in empty]
        if not following:
            return path
        node = following[0]
    return path[path.index(node):] + [node]


def _refs_in(schema: JsonSchema) -> list[str]:
    refs: list[str] = []
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return refs


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []
