"""A small DOM for tests: html.parser into a tree of nodes, with find_all and text."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"meta", "br", "hr", "img", "input", "link", "source", "wbr", "col", "area", "base", "embed", "track"}


@dataclass
class Node:
    tag: str
    attrs: dict
    parent: "Node | None" = None
    children: list = field(default_factory=list)  # Node or str

    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs) -> list["Node"]:
        return [n for n in self.iter() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes())
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def ancestor(self, tag: str) -> "Node | None":
        p = self.parent
        while p is not None and p.tag != tag:
            p = p.parent
        return p


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.at = self.root
        self.errors: list[str] = []

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.at)
        self.at.children.append(node)
        if tag not in VOID:
            self.at = node

    def handle_startendtag(self, tag, attrs):
        self.at.children.append(Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.at))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        n = self.at
        while n is not None and n.tag != tag:
            n = n.parent
        if n is None:
            self.errors.append(f"stray </{tag}>")
            return
        if n is not self.at:
            self.errors.append(f"</{tag}> closes unclosed <{self.at.tag}>")
        self.at = n.parent

    def handle_data(self, data):
        self.at.children.append(data)


def parse(page: str) -> tuple[Node, list[str]]:
    """The tree, and nesting errors (an unclosed or stray tag)."""
    b = _Builder()
    b.feed(page)
    b.close()
    if b.at is not b.root:
        b.errors.append(f"<{b.at.tag}> never closed")
    return b.root, b.errors
