"""What each NCCL protocol puts on the wire, and whether its sends wait for their stores.

From NCCL's primitives (reference §7), which the MSCCL executors run:

* **Simple** moves payload only. A send ends with a memory fence (``__threadfence_system``)
  before it posts its step to the receiver: it is done once its stores are visible.
* **LL** writes 16-byte lines of 8 bytes of data and an 8-byte flag (``union ncclLLFifoLine``):
  twice the payload on the wire, and in the receiver's buffer it is read from. The flag travels
  with the data, so a send does not wait for its stores ("LL.send is the only situation where
  there is no barrier at the end", ``sendWithBarrier``).
* **LL128** writes 128-byte lines of 120 bytes of data and an 8-byte flag (``NCCL_LL128_DATAELEMS``
  of ``NCCL_LL128_LINEELEMS``): 16/15 of the payload, and its sends do not wait either.

nuna applies this to the plan's protocol unless asked to replay every plan as Simple
(``nuna.sim.SimOptions.protocol_model``).
"""

from __future__ import annotations

from dataclasses import dataclass

from nuna.plan.ir import Protocol


@dataclass(frozen=True, slots=True)
class Wire:
    """A protocol's bytes on the wire per payload byte, ``num / den``, and whether its sends
    complete only once their stores have (``fenced``)."""

    num: int
    den: int
    fenced: bool

    def wire_bytes(self, payload_bytes: int) -> int:
        """Bytes on the wire for ``payload_bytes`` of data sent at once, rounded up."""
        return -(-payload_bytes * self.num // self.den)

    def to_json(self) -> dict[str, float | bool]:
        return {"wire_bytes_per_payload_byte": self.num / self.den, "fenced_sends": self.fenced}


SIMPLE_WIRE = Wire(1, 1, True)
_WIRE = {Protocol.SIMPLE: SIMPLE_WIRE, Protocol.LL: Wire(2, 1, False), Protocol.LL128: Wire(16, 15, False)}


def protocol_wire(protocol: Protocol) -> Wire:
    """The wire format of ``protocol``."""
    return _WIRE[protocol]
