"""hvdcore.ports: ports handed to another process come from below the ephemeral range, where
the kernel never gives them to an outgoing connection or a bind to port 0 meanwhile."""

from __future__ import annotations

import socket
from pathlib import Path

from hvdcore.ports import LOWEST, ephemeral_range, handoff_port, handoff_ports


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    low, _ = ephemeral_range()
    ports = handoff_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        assert LOWEST <= port < low, (port, low)
        with socket.socket() as s:  # free: this test can listen there
            s.bind(("127.0.0.1", port))
            s.listen(1)
    assert LOWEST <= handoff_port() < low


def test_a_taken_port_is_not_handed_out() -> None:
    # hold many ports of the range: none of them comes back
    held = []
    try:
        for port in handoff_ports(50):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        assert not taken & set(handoff_ports(50))
    finally:
        for s in held:
            s.close()


def test_the_range_setting_is_read_or_defaulted(tmp_path: Path) -> None:
    setting = tmp_path / "range"
    setting.write_text("40000\t50000\n")
    assert ephemeral_range(str(setting)) == (40000, 50000)
    setting.write_text("garbage")
    assert ephemeral_range(str(setting)) == (32768, 60999)
    assert ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
