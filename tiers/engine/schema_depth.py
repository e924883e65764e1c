"""How deep a JSON schema nests once its `$ref`s are followed: an upper bound on the nesting the grammar library
walks (recursively, on the native stack) when it compiles the schema.

The library compiles each `$ref` target once and refers to it from then on, so one path of its recursion enters
each target at most once. The bound: over the graph whose vertices are the root and every `$ref` target, with an
edge from a vertex to each target referenced inside it, the heaviest path, where a vertex weighs its own inline
height (schema objects nested inside it, the object itself and a `$ref`'s object included, not descending into
`$defs`) and the vertices of a strongly connected component (a recursion) are collapsed into one that weighs
their sum.
"""
from __future__ import annotations

from typing import Any

from tiers.engine.schema_refs import DEFINITIONS, SchemaGraph, subschemas


def expanded_depth(graph: SchemaGraph) -> int:
    """The bound above, in schema objects (0 for a boolean root)."""
    root = graph.root
    if not isinstance(root, dict):
        return 0
    vertices = {id(root): root, **{key: target for key, (_, target) in graph.targets().items()}}
    heights = _inline_heights(graph)
    edges = {key: graph.targets_in(schema) for key, schema in vertices.items()}
    best: dict[int, int] = {}  # component -> heaviest path from it
    component_of: dict[int, int] = {}
    for number, members in enumerate(_components(vertices, edges)):  # successors' components come first
        for key in members:
            component_of[key] = number
        onward = max((best[component_of[t]] for key in members for t in edges[key]
                      if component_of.get(t, number) != number), default=0)
        best[number] = sum(heights[key] for key in members) + onward
    return best[component_of[id(root)]]


def _inline_heights(graph: SchemaGraph) -> dict[int, int]:
    """id(schema) -> schema objects on its deepest inline path (itself included; `$defs` not entered)."""
    heights: dict[int, int] = {}
    for schema in reversed(graph.schemas):  # preorder reversed: every child before its parent
        heights[id(schema)] = 1 + max((heights.get(id(sub), 1) for key, sub in subschemas(schema)
                                       if key not in DEFINITIONS), default=0)
    return heights


def _components(vertices: dict[int, Any], edges: dict[int, list[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components, iteratively, each listed after every component it reaches."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    components: list[list[int]] = []
    for start in vertices:
        if start in index:
            continue
        work: list[tuple[int, int]] = [(start, 0)]
        while work:
            vertex, position = work.pop()
            if position == 0:
                index[vertex] = low[vertex] = len(index)
                stack.append(vertex)
                on_stack.add(vertex)
            following = edges[vertex]
            if position < len(following):
                work.append((vertex, position + 1))
                successor = following[position]
                if successor not in index:
                    work.append((successor, 0))
                elif successor in on_stack:
                    low[vertex] = min(low[vertex], index[successor])
                continue
            if low[vertex] == index[vertex]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == vertex:
                        break
                components.append(members)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[vertex])
    return components
