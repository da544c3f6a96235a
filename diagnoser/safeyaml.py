"""Bounded YAML: the one loader for every YAML file a user hands the doctor (rule packs, launch files, vLLM
configs, compose and Kubernetes manifests).

yaml.safe_load never runs code, but it does not bound what a document costs: an alias bomb (`a: &a [x, x]`,
`b: &b [*a, *a]`, ... nine levels deep) composes in microseconds into a graph that anything walking it
expands to billions of nodes (11 GB in a rule's `keywords`). This module composes the document, measures
the size it has once every alias is expanded (exactly, memoised on the node graph, so the bomb is measured,
not expanded), and refuses a document over MAX_NODES expanded nodes, MAX_DEPTH levels or MAX_BYTES of
text, with a one-line error. Aliases within those bounds (compose files' `<<: *defaults`) work as before.

    >>> load("a: &x [1, 2]\\nb: *x\\n")
    {'a': [1, 2], 'b': [1, 2]}
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from diagnoser.errors import LimitError

#: Bounds for one document (or one stream of documents): far above any real rule or launch file.
MAX_BYTES = 8 << 20
MAX_NODES = 200_000
MAX_DEPTH = 100
#: characters of scalars in the alias-expanded document: a long scalar aliased thousands of times is few nodes
#: and a small file, but gigabytes once built (`<<: *defaults` and other normal aliases stay far below)
MAX_EXPANDED_CHARS = 4 * MAX_BYTES

#: libyaml's composer when it is there (ten times faster on the rule files); pure Python otherwise.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YAMLLimitError(yaml.YAMLError, LimitError):
    """A YAML document over a bound. Also a YAMLError, so callers that report invalid YAML report this too."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = None


def _check_text(text: str) -> None:
    if len(text) > MAX_BYTES:
        raise YAMLLimitError(f"the YAML text is {len(text):,} characters; the limit is {MAX_BYTES:,}")


def check_node(root: yaml.Node) -> None:
    """Refuse a node graph whose alias-expanded size or depth is over the bounds (linear in the graph)."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    chars: dict[int, int] = {}
    # iterative post-order walk: a deep document must not hit Python's recursion limit here
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = _children(node)
            sizes[key] = 1 + sum(sizes[id(k)] for k in kids)
            depths[key] = 1 + max((depths[id(k)] for k in kids), default=0)
            chars[key] = (len(node.value) if isinstance(node, yaml.ScalarNode) else 0) + sum(chars[id(k)] for k in kids)
            if chars[key] > MAX_EXPANDED_CHARS:
                raise YAMLLimitError(f"the document's values expand to more than {MAX_EXPANDED_CHARS:,} characters "
                                     "(a long value aliased many times?); write the values out or use fewer aliases")
            if sizes[key] > MAX_NODES:
                raise YAMLLimitError(f"the document expands to more than {MAX_NODES:,} nodes (an alias bomb?); "
                                     "write the values out or use fewer aliases")
            if depths[key] > MAX_DEPTH:
                raise YAMLLimitError(f"the document nests more than {MAX_DEPTH} levels deep")
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise YAMLLimitError("the document refers to itself (a recursive alias)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def compose_all(text: str) -> Iterator[yaml.Node]:
    """yaml.compose_all with the bounds: each document's node graph, checked before it is handed out."""
    _check_text(text)
    total = 0
    try:
        for node in yaml.compose_all(text, Loader=_LOADER):
            if node is None:
                continue
            check_node(node)
            total += 1
            if total > MAX_NODES:
                raise YAMLLimitError(f"more than {MAX_NODES:,} YAML documents in one file")
            yield node
    except RecursionError:
        raise YAMLLimitError(f"the document nests more than {MAX_DEPTH} levels deep") from None


def construct(node: yaml.Node) -> Any:
    """The Python value of a checked node (the safe constructor: plain data only)."""
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load(text: str) -> Any:
    """yaml.safe_load with the bounds (None for an empty document)."""
    _check_text(text)
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except RecursionError:
        raise YAMLLimitError(f"the document nests more than {MAX_DEPTH} levels deep") from None
    if node is None:
        return None
    check_node(node)
    return construct(node)
