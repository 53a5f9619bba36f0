"""Where ranks can reach each other: this host's IPv4 interfaces and the rendezvous address choice.

Framework-free and pure except :func:`local_interfaces` and :func:`local_host` (which read this
process's host): :func:`choose_address` takes every rank's :class:`HostReport` and returns the
address rank 0 listens on, the interface it belongs to, why it was chosen, and the interface
each rank's Gloo should use. :mod:`hvdcore.torch.rendezvous` gathers the reports over MPI.

Rules, in order:

1. ``MASTER_ADDR`` set: that address (rank 0 must be reachable there).
2. An interface rule (``HVDCORE_GLOO_IFACE`` / ``HOROVOD_GLOO_IFACE``, else ``GLOO_SOCKET_IFNAME``,
   else ``NCCL_SOCKET_IFNAME`` with NCCL's ``^``/``=``/prefix syntax): rank 0's address on the
   first matching interface; no match is an error naming rank 0's interfaces.
3. All ranks on one host: rank 0's loopback address.
4. Ranks on several hosts: a non-loopback address of rank 0, on a subnet every other host has an
   address on if there is one (else the subnet most ranks share, and the reason says which ranks
   lack it); none at all is an error.

Example::

    >>> me = HostReport(0, "vm", "", local_interfaces())
    >>> choose_address([me, me]).address          # one host: loopback
    '127.0.0.1'
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hvdcore.errors import RendezvousError

__all__ = ["Interface", "HostReport", "IfaceRule", "Choice", "local_interfaces", "local_host",
           "iface_rule", "choose_address"]

_SIOCGIFFLAGS, _SIOCGIFADDR, _SIOCGIFNETMASK = 0x8913, 0x8915, 0x891B
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8


@dataclass(frozen=True)
class Interface:
    """One IPv4 address of a network interface."""

    name: str
    address: str
    netmask: str = "255.255.255.0"
    loopback: bool = False

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The subnet this address is on."""
        return ipaddress.IPv4Network(f"{self.address}/{self.netmask}", strict=False)

    def __str__(self) -> str:
        return f"{self.name} {self.address}/{self.network.prefixlen}"


@dataclass(frozen=True)
class HostReport:
    """What one rank tells the others: its host, interfaces and Gloo interface wishes.

    ``host`` names the host in messages and, with ``machine``, identifies it: ranks with equal
    ``(host, machine)`` share a host (loopback reaches them all). ``gloo_request`` is this rank's
    ``HVDCORE_GLOO_IFACE``; ``gloo_env`` its own ``GLOO_SOCKET_IFNAME`` (left alone when set).
    """

    rank: int
    host: str
    machine: str
    interfaces: Sequence[Interface] = ()
    gloo_request: str | None = None
    gloo_env: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """Host identity."""
        return (self.host, self.machine)


@dataclass(frozen=True)
class IfaceRule:
    """Which interfaces the user allows, and the variable that said so.

    ``names`` are comma-separated; with ``nccl_syntax`` a leading ``^`` excludes, ``=`` asks for
    exact names, otherwise a name is a prefix (NCCL's rules); otherwise names are exact.
    """

    spec: str
    source: str
    nccl_syntax: bool = False

    def matches(self, name: str) -> bool:
        """True when interface ``name`` is allowed."""
        spec, exclude, exact = self.spec.strip(), False, not self.nccl_syntax
        if self.nccl_syntax and spec.startswith("^"):
            spec, exclude = spec[1:], True
        if self.nccl_syntax and spec.startswith("="):
            spec, exact = spec[1:], True
        names = [n.strip() for n in spec.split(",") if n.strip()]
        hit = any(name == n if exact else name.startswith(n) for n in names)
        return hit != exclude

    def __str__(self) -> str:
        return f"{self.source}={self.spec}"


@dataclass(frozen=True)
class Choice:
    """Rank 0's rendezvous address, why, and the Gloo interface of every rank (None: leave
    Gloo's own choice or the user's ``GLOO_SOCKET_IFNAME``)."""

    address: str
    interface: str | None
    reason: str
    hosts: int
    gloo_ifaces: tuple[str | None, ...]


def local_interfaces() -> list[Interface]:
    """IPv4 addresses of the interfaces that are up (primary address of each; Linux ioctls).

    Returns an empty list where the ioctls are unavailable.
    """
    found: list[Interface] = []
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        return found
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            req = struct.pack("256s", name.encode()[:15])
            try:
                flags = struct.unpack("H", fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, req)[16:18])[0]
                addr = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)[20:24]
                mask = fcntl.ioctl(s.fileno(), _SIOCGIFNETMASK, req)[20:24]
            except OSError:  # no IPv4 address on this interface
                continue
            if flags & _IFF_UP:
                found.append(Interface(name, socket.inet_ntoa(addr), socket.inet_ntoa(mask),
                                       bool(flags & _IFF_LOOPBACK)))
    return found


def local_host(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``(host, machine)`` of this process.

    ``host``: the hostname, plus ``[SLURM_NODEID=n]`` under Slurm, so that fake nodes sharing a
    hostname count as different hosts. ``machine``: kernel boot id and network namespace, so that
    two machines (or containers with their own network) sharing a hostname differ too.
    """
    env = os.environ if environ is None else environ
    host = socket.gethostname()
    if env.get("SLURM_NODEID"):
        host += f"[SLURM_NODEID={env['SLURM_NODEID']}]"
    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
        parts.append(str(os.stat("/proc/self/ns/net").st_ino))
    except OSError:
        pass
    return host, ":".join(parts)


def iface_rule(gloo_iface: str, gloo_iface_source: str,
               environ: Mapping[str, str] | None = None) -> IfaceRule | None:
    """The interface rule in force: hvdcore's knob (value and source variable), else
    ``GLOO_SOCKET_IFNAME``, else ``NCCL_SOCKET_IFNAME``, else None."""
    env = os.environ if environ is None else environ
    if gloo_iface:
        return IfaceRule(gloo_iface, gloo_iface_source)
    if env.get("GLOO_SOCKET_IFNAME"):
        return IfaceRule(env["GLOO_SOCKET_IFNAME"], "GLOO_SOCKET_IFNAME")
    if env.get("NCCL_SOCKET_IFNAME"):
        return IfaceRule(env["NCCL_SOCKET_IFNAME"], "NCCL_SOCKET_IFNAME", nccl_syntax=True)
    return None


def _listing(report: HostReport) -> str:
    return ", ".join(str(i) for i in report.interfaces) or "no IPv4 interface found"


def _on(report: HostReport, net: ipaddress.IPv4Network,
        rule: IfaceRule | None = None) -> Interface | None:
    """The report's interface on ``net`` (one the rule allows first)."""
    hits = [i for i in report.interfaces if ipaddress.IPv4Address(i.address) in net]
    allowed = [i for i in hits if rule is None or rule.matches(i.name)]
    return next(iter(allowed or hits), None)


def _resolve(addr: str) -> str:
    try:
        return socket.gethostbyname(addr)
    except OSError as exc:
        raise RendezvousError(
            f"MASTER_ADDR={addr!r} does not resolve to an IPv4 address on rank 0 ({exc}); set "
            "it to an address of rank 0's node, or unset it to let hvdcore choose") from exc


def choose_address(reports: Sequence[HostReport], master_addr: str | None = None,
                   rule: IfaceRule | None = None) -> Choice:
    """Rank 0's rendezvous address for these ranks (``reports[0]`` is rank 0's); the rules are
    in the module docstring. Raises RendezvousError when no address fits, naming rank 0's
    interfaces and what to set.

    >>> a = HostReport(0, "n1", "", [Interface("eth0", "10.0.0.1")])
    >>> b = HostReport(1, "n2", "", [Interface("eth0", "10.0.0.2")])
    >>> choose_address([a, b]).address
    '10.0.0.1'
    """
    zero = reports[0]
    hosts = len({r.key for r in reports})
    others = [r for r in reports if r.key != zero.key]
    chosen: Interface | None = None
    if master_addr:
        address = master_addr
        ip = ipaddress.IPv4Address(_resolve(master_addr))
        chosen = next((i for i in zero.interfaces if ipaddress.IPv4Address(i.address) == ip),
                      None)
        reason = "MASTER_ADDR is set" + ("" if chosen else " (not an address of rank 0's "
                                          f"interfaces: {_listing(zero)})")
    else:
        pool = [i for i in zero.interfaces if rule is None or rule.matches(i.name)]
        if rule is not None and not pool:
            raise RendezvousError(
                f"{rule} matches none of rank 0's interfaces on {zero.host} ({_listing(zero)}); "
                "set it to one of them (the network that connects the nodes)")
        if hosts == 1 and rule is None:
            lo = next((i for i in zero.interfaces if i.loopback), None)
            chosen, address = lo, (lo.address if lo else "127.0.0.1")
            reason = "all ranks on one host: loopback"
        else:
            remote = [i for i in pool if not i.loopback] if hosts > 1 else pool
            if not remote:
                raise RendezvousError(
                    f"ranks run on {hosts} hosts but rank 0 on {zero.host} has no non-loopback "
                    f"IPv4 address{' allowed by ' + str(rule) if rule else ''} "
                    f"({_listing(zero)}); set MASTER_ADDR to an address of rank 0's node that "
                    "the other nodes reach, or HVDCORE_GLOO_IFACE to its interface")
            # Prefer the subnet that reaches the most other ranks (ties: interface order).
            reach = [[r.rank for r in others if _on(r, i.network)] for i in remote]
            best = max(range(len(remote)), key=lambda k: len(reach[k]))
            chosen, address = remote[best], remote[best].address
            missing = sorted({r.rank for r in others} - set(reach[best]))
            why = f"{rule} " if rule else ""
            if hosts == 1:
                reason = f"{why}(all ranks on one host)".strip()
            elif not missing:
                reason = (f"{why}ranks on {hosts} hosts; subnet {chosen.network} is shared by "
                          "every rank").strip()
            else:
                reason = (f"{why}ranks on {hosts} hosts; no subnet of rank 0 is shared by every "
                          f"rank: ranks {missing} have no address on {chosen.network}").strip()
    net = chosen.network if chosen is not None and not chosen.loopback else None
    gloo: list[str | None] = []
    for r in reports:
        if r.gloo_env:
            gloo.append(None)
        elif r.gloo_request:
            gloo.append(r.gloo_request.split(",")[0].strip())
        elif hosts == 1:
            lo = next((i for i in r.interfaces if i.loopback), None)
            gloo.append(lo.name if lo else None)
        else:
            mine = _on(r, net, rule) if net is not None else None
            gloo.append(mine.name if mine else None)
    return Choice(address, chosen.name if chosen else None, reason, hosts, tuple(gloo))
