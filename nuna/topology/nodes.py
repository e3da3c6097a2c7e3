"""Typed node keys of the topology graphs.

Every node of a chip or pod graph is one of these NamedTuples, so a key says what it is and
where: ``Router(gpu, x, y)``, ``Cu(gpu, cu)``, ``IoPort(gpu, port)``, ``Hbm(gpu, stack)`` and
``Switch(plane)``. Plain NamedTuples compare as tuples, which would make ``Cu(0, 5)``,
``IoPort(0, 5)`` and ``Hbm(0, 5)`` the same networkx node; these compare (and hash) by type
as well as by value, so the three stay distinct.
"""

from __future__ import annotations

from typing import NamedTuple


class Router(NamedTuple):
    """Mesh router at global mesh coordinates ``(x, y)`` of GPU ``gpu`` (x along the long edge)."""

    gpu: int
    x: int
    y: int

    def __eq__(self, other: object) -> bool:
        return type(other) is Router and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("Router", self.gpu, self.x, self.y))


class Cu(NamedTuple):
    """Compute unit ``cu`` (0-based index into the chip's CUs) of GPU ``gpu``."""

    gpu: int
    cu: int

    def __eq__(self, other: object) -> bool:
        return type(other) is Cu and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("Cu", self.gpu, self.cu))


class IoPort(NamedTuple):
    """Scale-up I/O port ``port`` of GPU ``gpu``; it is wired to ``Switch(port)``."""

    gpu: int
    port: int

    def __eq__(self, other: object) -> bool:
        return type(other) is IoPort and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("IoPort", self.gpu, self.port))


class Hbm(NamedTuple):
    """HBM stack ``stack`` of GPU ``gpu``."""

    gpu: int
    stack: int

    def __eq__(self, other: object) -> bool:
        return type(other) is Hbm and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("Hbm", self.gpu, self.stack))


class Switch(NamedTuple):
    """Scale-up switch of rail ``plane``: it joins I/O port ``plane`` of every GPU."""

    plane: int

    def __eq__(self, other: object) -> bool:
        return type(other) is Switch and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("Switch", self.plane))


Node = Router | Cu | IoPort | Hbm | Switch

#: ``kind`` node attribute of each node type.
NODE_KIND: dict[type, str] = {Router: "router", Cu: "cu", IoPort: "io", Hbm: "hbm", Switch: "switch"}

#: ``kind`` edge attribute values, in code order (``ChipGeometry.edge_kind`` holds these codes).
EDGE_KINDS: tuple[str, ...] = ("noc", "die_crossing", "cu", "io", "scaleup", "hbm")
EDGE_CODE: dict[str, int] = {k: i for i, k in enumerate(EDGE_KINDS)}
