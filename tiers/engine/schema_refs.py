"""Where each `$ref` of a JSON schema points, resolved the way the grammar library (llguidance, through the Rust
`referencing` crate) resolves it: JSON pointers (percent-encoded, `~0` / `~1`), `$defs` and `definitions`,
`$anchor`s, and `$id`s (absolute or relative, on embedded resources) that change the base a reference is read
against. Resolution is the `referencing` library's (the one `jsonschema` uses); a `$ref` it cannot resolve
(an external URL, a pointer to nowhere, `$dynamicRef`) is left to the grammar library, which refuses it.

The graph is built over the schema as parsed JSON (no object shared between two places), walked iteratively:
nesting does not reach Python's recursion limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from referencing import Registry, Resource, Specification
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, UnknownDialect, specification_with

JsonSchema = dict[str, Any] | bool

# Keywords whose values are schemas (a schema, an array of schemas, or a map of names to schemas), in every draft.
IN_VALUE = ("additionalProperties", "additionalItems", "contains", "contentSchema", "else", "if", "items", "not",
            "propertyNames", "then", "unevaluatedItems", "unevaluatedProperties")
IN_ARRAY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
IN_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
DEFINITIONS = ("$defs", "definitions")  # compiled only where a $ref reaches them


def subschemas(schema: dict[str, Any]) -> Iterator[tuple[str, JsonSchema]]:
    """(keyword, subschema) for every schema directly inside `schema`, in document order of the keywords above."""
    for key in IN_VALUE:
        value = schema.get(key)
        if isinstance(value, (dict, bool)):
            yield key, value
    for key in IN_ARRAY:
        value = schema.get(key)
        if isinstance(value, list):
            yield from ((key, item) for item in value if isinstance(item, (dict, bool)))
    for key in IN_MAP:
        value = schema.get(key)
        if isinstance(value, dict):
            yield from ((key, item) for item in value.values() if isinstance(item, (dict, bool)))


@dataclass(frozen=True)
class Ref:
    written: str  # the `$ref` as the schema writes it
    target: JsonSchema | None  # the schema it resolves to; None: unresolvable here (the grammar library refuses it)


@dataclass
class SchemaGraph:
    root: JsonSchema
    schemas: list[dict[str, Any]] = field(default_factory=list)  # every schema object, once, the root first
    refs: dict[int, Ref] = field(default_factory=dict)  # id(a schema with a string `$ref`) -> where it points

    def ref(self, schema: Any) -> Ref | None:
        return self.refs.get(id(schema)) if isinstance(schema, dict) else None

    def targets_in(self, schema: Any) -> list[int]:
        """id() of the object targets of the `$ref`s inside `schema` (itself included, `$defs` not entered), in
        document order."""
        found: list[int] = []
        stack: list[Any] = [schema]
        while stack:
            node = stack.pop()
            if not isinstance(node, dict):
                continue
            ref = self.ref(node)
            if ref is not None and isinstance(ref.target, dict):
                found.append(id(ref.target))
            stack.extend(reversed([sub for key, sub in subschemas(node) if key not in DEFINITIONS]))
        return found

    def targets(self) -> dict[int, tuple[str, dict[str, Any]]]:
        """id(target) -> (the first `$ref` written to it, the target), for every resolved object target."""
        found: dict[int, tuple[str, dict[str, Any]]] = {}
        for ref in self.refs.values():
            if isinstance(ref.target, dict) and id(ref.target) not in found:
                found[id(ref.target)] = (ref.written, ref.target)
        return found


def schema_graph(root: JsonSchema) -> SchemaGraph:
    """Every schema object of `root` (those a `$ref` reaches outside the schema keywords included) and where each
    `$ref` points."""
    graph = SchemaGraph(root)
    if not isinstance(root, dict):
        return graph
    specification = _specification(root)
    resource = _resource(root, specification)
    uri = _id(resource) or ""
    registry = Registry().with_resource(uri, resource)
    try:
        registry = registry.crawl()
    except (TypeError, ValueError, AttributeError):  # a malformed `$id` or `$anchor`: lookups through it fail
        pass
    resolver = registry.resolver(base_uri=uri)
    scopes: dict[int, Any] = {}
    _walk(root, resolver, True, specification, scopes, graph.schemas)
    index = 0
    while index < len(graph.schemas):  # grows when a target lies outside the walked keywords
        schema = graph.schemas[index]
        index += 1
        written = schema.get("$ref")
        if not isinstance(written, str):
            continue
        try:
            resolved = scopes[id(schema)].lookup(written)
        except (Unresolvable, LookupError, ValueError, TypeError, AttributeError):
            graph.refs[id(schema)] = Ref(written, None)
            continue
        target = resolved.contents
        graph.refs[id(schema)] = Ref(written, target if isinstance(target, (dict, bool)) else None)
        if isinstance(target, dict) and id(target) not in scopes:
            _walk(target, resolved.resolver, True, specification, scopes, graph.schemas)
    return graph


def _walk(top: dict[str, Any], resolver: Any, in_scope: bool, specification: Specification, scopes: dict[int, Any],
          order: list[dict[str, Any]]) -> None:
    """Records the resolver in scope at each schema object under `top` (preorder); `in_scope`: `top`'s own `$id`
    is already applied to `resolver`."""
    stack: list[tuple[Any, Any, bool]] = [(top, resolver, in_scope)]
    while stack:
        schema, scope, applied = stack.pop()
        if not isinstance(schema, dict) or id(schema) in scopes:
            continue
        if not applied:
            resource = _resource(schema, specification)
            if _id(resource) is not None:
                scope = scope.in_subresource(resource)
        scopes[id(schema)] = scope
        order.append(schema)
        stack.extend((sub, scope, False) for _, sub in reversed(list(subschemas(schema))))


def _specification(root: dict[str, Any]) -> Specification:
    dialect = root.get("$schema")
    if not isinstance(dialect, str):
        return DRAFT202012
    try:
        return specification_with(dialect, default=DRAFT202012)
    except UnknownDialect:
        return DRAFT202012


def _resource(schema: dict[str, Any], default: Specification) -> Resource:
    try:
        return Resource.from_contents(schema, default_specification=default)
    except (UnknownDialect, TypeError, ValueError):
        return default.create_resource(schema)


def _id(resource: Resource) -> str | None:
    try:
        return resource.id()
    except AttributeError:  # a `$id` that is not a string
        return None
