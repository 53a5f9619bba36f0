"""A second host on this machine for the launcher's ssh path: a network namespace joined to this
one by a veth pair, with a real OpenSSH server in it (tests/test_ssh_hosts.py).

The namespace has its own interfaces and addresses (its address is not one of this machine's,
so ``hvdcorerun`` treats it as another host and starts ranks there over ssh) but shares the
file system, as the nodes of a cluster share their home and software. Needs root, ``ip``
(iproute2) and ``sshd`` (openssh-server, ci/apt/ssh.txt).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class NetnsHost:
    """The namespace host: where to reach it and how to log in."""

    netns: str
    iface: str  # the veth's name, the same on both sides
    addr: str  # its address (this machine's side of the pair: ``local_addr``)
    local_addr: str
    key: Path  # the client's private key, authorised there
    inode: str  # ``net:[N]``, what /proc/PID/ns/net reads for a process in it

    def ssh_args(self) -> str:
        """``--ssh-args`` that keep the test's host key out of root's known_hosts."""
        return "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"


def missing() -> str | None:
    """Why this machine cannot host one, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.access(SSHD, os.X_OK):
        return f"needs {SSHD} (openssh-server)"
    return None


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)


@contextmanager
def netns_host(workdir: Path) -> Iterator[NetnsHost]:
    """Make the namespace, the link and the ssh server; remove them all afterwards."""
    tag = os.getpid() % 100000
    net, iface = f"hvdssh{tag}", f"hvs{tag}"
    third = os.getpid() % 250 + 1
    local_addr, addr = f"10.213.{third}.1", f"10.213.{third}.2"
    keys = workdir / "keys"
    keys.mkdir()
    for name in ("host", "client"):
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name))
    shutil.copy(keys / "client.pub", keys / "authorized_keys")
    config = workdir / "sshd_config"
    config.write_text("\n".join([
        f"ListenAddress {addr}", "Port 22", f"HostKey {keys / 'host'}",
        f"AuthorizedKeysFile {keys / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", f"PidFile {workdir / 'sshd.pid'}", ""]))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation root
    sshd = None
    _sh("ip", "netns", "add", net)
    try:
        _sh("ip", "link", "add", iface, "type", "veth", "peer", "name", iface, "netns", net)
        _sh("ip", "addr", "add", f"{local_addr}/30", "dev", iface)
        _sh("ip", "link", "set", iface, "up")
        _sh("ip", "-n", net, "addr", "add", f"{addr}/30", "dev", iface)
        _sh("ip", "-n", net, "link", "set", iface, "up")
        _sh("ip", "-n", net, "link", "set", "lo", "up")
        _sh("ip", "-n", net, "route", "add", "default", "via", local_addr)
        sshd = subprocess.Popen(["ip", "netns", "exec", net, SSHD, "-D", "-e", "-f", str(config)],
                                stdout=subprocess.DEVNULL, stderr=open(workdir / "sshd.log", "w"))
        _wait_for_port(addr, 22, sshd, workdir / "sshd.log")
        inode = f"net:[{os.stat(f'/run/netns/{net}').st_ino}]"  # (the namespace's nsfs file)
        yield NetnsHost(net, iface, addr, local_addr, keys / "client", inode)
    finally:
        if sshd is not None:
            sshd.terminate()
            try:
                sshd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                sshd.kill()
                sshd.wait()
        subprocess.run(["ip", "netns", "del", net], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", iface], capture_output=True, timeout=30)


def _wait_for_port(addr: str, port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd ended (exit {proc.returncode}): {log.read_text()}")
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"sshd did not listen on {addr}:{port} in 20 s: {log.read_text()}")
