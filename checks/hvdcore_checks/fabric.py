"""What transport a job really took: NCCL/RCCL's ``NCCL_DEBUG=INFO`` lines, Open MPI's and UCX's
verbose output, and hvdcore's Gloo rendezvous line; judged against what a partition declares.

NCCL/RCCL (``NCCL_DEBUG=INFO``; RCCL prints the same ``NCCL INFO`` lines) names its network
plugin once per rank (``NET/Socket : Using [0]eth0:...``, ``NET/IB : Using [0]mlx5_0:1/IB``,
``NET/OFI ...`` / ``Using network AWS Libfabric`` for aws-ofi-nccl/aws-ofi-rccl), then each
channel's path between two ranks (``via P2P/IPC``, ``via SHM/direct/direct``, ``via NET/IB/0``,
``via NET/Socket/1``, with ``/GDRDMA`` where GPUDirect RDMA is used) and NVLink SHARP
(``NVLS``). Open MPI says which point-to-point layer it picked with
``--mca pml_base_verbose 10`` (``select: component ucx selected``) and which byte transfer
layer reaches each peer with ``--mca btl_base_verbose 100`` (``Using vader btl`` / ``sm``:
shared memory, ``tcp``, ``ofi``); hvdcore's Gloo plane logs its rendezvous
(``torch.distributed rendezvous ...: Gloo interface lo``).

A partition declares what it must have in ``extras``: ``nccl_net`` (``IB``, ``AWS Libfabric``
/ ``OFI``, ``Socket``), ``mpi_transport`` (``ucx``, ``ofi``, ``sm``, ``tcp``),
``gpus_per_node``, ``nics_per_node``, ``gloo_interface``. :func:`judge` returns the
mismatches, each quoting the line that proves it; a socket fallback where a network plugin is
declared is always one, and so is a declaration no line of the output proves (no NCCL line
naming a host's GPUs where ``gpus_per_node`` is declared). One exception, :func:`unjudged`:
aws-ofi-nccl/-rccl releases that print ``Selected Provider is cxi`` without ``(found N nics)``
show no NIC count, so ``nics_per_node`` is reported as not shown instead of judged. Lines may
carry a launcher's prefix (``srun --label``: ``0: ``; ``mpirun --tag-output``:
``[1,0]<stdout>:``). The HPC-X/NGC plugin's ``IBext``/``IBext_v8`` network is ``IB``; with
``--mca mtl_base_verbose 10`` Open MPI's MTL under ``pml cm`` (``ofi``, ``psm2``) is a
transport of its own. GPUs per node are the distinct PCI bus ids of a host's communicator
init lines (``cudaDev 0 ... busId 42000``), so ranks that each see only their own GPU (all
``[0]``) count right; device indices only where no such line is printed.

    >>> f = parse("n1:1:1 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.1.0.2<0>")
    >>> f.nccl_net, f.nics
    ('Socket', ['hsn0'])
    >>> judge(f, {"nccl_net": "AWS Libfabric"})[0].split(":")[0]
    "NCCL/RCCL fell back to TCP sockets (expected nccl_net 'AWS Libfabric')"
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Fabric", "judge", "parse", "unjudged"]

_NCCL = re.compile(r"NCCL INFO (?P<msg>.*)$")
_NET_USING = re.compile(r"^NET/(?P<net>IB|Socket|OFI|\S+?)\s*:?\s*Using (?P<rest>.*)$")
_NET_PLUGIN = re.compile(r"^(?:Using network|NET/Plugin: Using) (?P<net>.+?)\s*$")
_OFI = re.compile(r"^NET/OFI\b(?P<rest>.*)$")
_VIA = re.compile(r"via (?P<path>(?:P2P|SHM|NET|NVLS|COLLNET)[/\w.-]*(?: Libfabric[/\w.-]*)?)")
# a NIC: ``[0]hsn0:10.1.0.2<0>``, ``[0]mlx5_0:1/IB``, ``[0]mlx5_0:1/IB/SHARP`` (HPC-X plugin)
_NIC = re.compile(r"\[\d+\](?P<nic>[\w.:-]+?)(?::\d+)?(?:/[A-Za-z]+)*(?::[\d.]+<\d+>|\s|$)")
_RANK_GPU = re.compile(r"\[(?P<dev>\d+)\] NCCL INFO")
# "comm 0x.. rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 42000 ... - Init START": the GPU's PCI
# bus id, the same whichever devices a rank sees (CUDA_VISIBLE_DEVICES per rank: all "[0]")
_BUS_ID = re.compile(r"\bcudaDev \d+\b.*?\bbusId (?P<bus>[0-9a-fA-F]+)\b")
# srun --label ("0: ", right-aligned) and mpirun --tag-output ("[1,0]<stdout>:") prefixes
_LAUNCHER_PREFIX = r"(?:\s*\d+:\s+|\[\d+,\d+\]<std(?:out|err)>:\s*)?"
_HOST = re.compile(rf"^{_LAUNCHER_PREFIX}(?P<host>[\w.-]+):\d+:\d+ \[\d+\] NCCL INFO")
_SELECTING = re.compile(r"select: initializing (?P<fw>pml|mtl) component (?P<comp>\w+)")
_PML = re.compile(r"select: component (?P<pml>\w+) selected")
_BTL = re.compile(r"Using (?P<btl>\w+) btl (?:for send )?to \[")
_UCX = re.compile(r"ucp_context.*(?:intra|inter)-node cfg#\d+ (?P<tls>.*)$")
_GLOO = re.compile(r"Gloo interface (?P<iface>[\w./-]+)")
#: Open MPI btl names -> the transport they are.
_BTL_KIND = {"vader": "sm", "sm": "sm", "self": "self", "tcp": "tcp", "ofi": "ofi",
             "uct": "ucx", "openib": "ib", "smcuda": "sm"}


def _net_name(raw: str) -> str:
    """NCCL's network name, normalised: ``IB``, ``Socket``, ``AWS Libfabric``."""
    raw = raw.strip()
    if re.fullmatch(r"IBext(?:_v\d+)?", raw):  # nccl-rdma-sharp-plugins (HPC-X, NGC images)
        return "IB"
    if raw.upper() in ("OFI", "AWS LIBFABRIC", "AWS-OFI", "LIBFABRIC"):
        return "AWS Libfabric"
    return {"ib": "IB", "socket": "Socket"}.get(raw.lower(), raw)


@dataclass
class Fabric:
    """What one job's output says about its transports (each with the line that says it)."""

    nccl_net: str | None = None
    nccl_net_line: str = ""
    nics: list[str] = field(default_factory=list)
    nics_line: str = ""
    #: a transport line that names no NIC count (aws-ofi's ``Selected Provider is cxi``)
    nics_unshown_line: str = ""
    #: channel paths: ``P2P/IPC``, ``SHM/direct/direct``, ``NET/IB/0/GDRDMA``, ... -> a line
    paths: dict[str, str] = field(default_factory=dict)
    gdr: bool = False
    gpus_per_host: dict[str, set[int]] = field(default_factory=dict)  # host -> [N] indices
    buses_per_host: dict[str, set[str]] = field(default_factory=dict)  # host -> PCI bus ids
    mpi_pml: str | None = None
    mpi_mtl: str | None = None
    mpi_transports: dict[str, str] = field(default_factory=dict)  # kind -> a line
    gloo_interface: str | None = None
    gloo_line: str = ""

    @property
    def gpus_per_node(self) -> int:
        """The most GPUs NCCL used on one node (0: no NCCL lines): distinct bus ids where
        the communicators' init lines give them, else distinct device indices."""
        return max((len(self.buses_per_host.get(h) or g) for h, g in self.gpus_per_host.items()),
                   default=0)


def parse(text: str) -> Fabric:
    """Read every line of a job's output (stdout and stderr together)."""
    f = Fabric()
    framework: dict[str, str] = {}  # component -> pml or mtl (both print "component X selected")
    for line in text.splitlines():
        line = line.rstrip()
        m = _NCCL.search(line)
        if m:
            _nccl_line(f, m["msg"].strip(), line)
            continue
        if m := _SELECTING.search(line):
            framework.setdefault(m["comp"], m["fw"])
        elif m := _PML.search(line):
            if framework.get(m["pml"]) == "mtl":
                if f.mpi_mtl is None:
                    f.mpi_mtl = m["pml"]
                    f.mpi_transports.setdefault(m["pml"], line)
            elif f.mpi_pml is None:
                f.mpi_pml = m["pml"]
                f.mpi_transports.setdefault(m["pml"], line)
        elif m := _BTL.search(line):
            f.mpi_transports.setdefault(_BTL_KIND.get(m["btl"], m["btl"]), line)
        elif m := _UCX.search(line):
            f.mpi_transports.setdefault("ucx", line)
        elif m := _GLOO.search(line):
            f.gloo_interface, f.gloo_line = m["iface"], line
    return f


def _nccl_line(f: Fabric, msg: str, line: str) -> None:
    host, dev = _HOST.search(line), _RANK_GPU.search(line)
    if host and dev:
        f.gpus_per_host.setdefault(host["host"], set()).add(int(dev["dev"]))
        if bus := _BUS_ID.search(msg):
            f.buses_per_host.setdefault(host["host"], set()).add(bus["bus"].lower())
    if m := _NET_PLUGIN.match(msg):
        f.nccl_net, f.nccl_net_line = _net_name(m["net"]), line
    elif m := _NET_USING.match(msg):
        if f.nccl_net is None or f.nccl_net == "Socket" or m["net"] != "Socket":
            f.nccl_net, f.nccl_net_line = _net_name(m["net"]), line
        for nic in _NIC.finditer(m["rest"].split(";")[0]):
            if nic["nic"] not in f.nics:
                f.nics.append(nic["nic"])
                f.nics_line = line
    elif m := _OFI.match(msg):
        if f.nccl_net in (None, "Socket"):
            f.nccl_net, f.nccl_net_line = "AWS Libfabric", line
        found = re.search(r"found (\d+) nics", m["rest"])
        if found and not f.nics:
            f.nics, f.nics_line = [f"ofi{i}" for i in range(int(found[1]))], line
        elif "Selected Provider" in m["rest"] and not found:
            f.nics_unshown_line = f.nics_unshown_line or line
    if "GPU Direct RDMA Enabled" in msg or "/GDRDMA" in msg:
        f.gdr = True
    for via in _VIA.finditer(msg):
        f.paths.setdefault(via["path"], line)
    if "NVLS" in msg and "NVLS" not in f.paths and "support" not in msg:
        f.paths["NVLS"] = line


def judge(f: Fabric, declared: dict) -> list[str]:
    """The mismatches between ``f`` and a partition's ``declared`` extras, each quoting the
    line that proves it (or saying that no line said it)."""
    out = []
    want = declared.get("nccl_net")
    if want:
        want = _net_name(want)
        if f.nccl_net is None:
            out.append(f"expected nccl_net {want!r}: no NCCL/RCCL network line in the output "
                       "(NCCL_DEBUG=INFO set? a device collective run?)")
        elif f.nccl_net == "Socket" and want != "Socket":
            out.append(f"NCCL/RCCL fell back to TCP sockets (expected nccl_net {want!r}): "
                       f"{f.nccl_net_line.strip()}")
        elif f.nccl_net != want:
            out.append(f"NCCL/RCCL took {f.nccl_net!r}, expected nccl_net {want!r}: "
                       f"{f.nccl_net_line.strip()}")
        socket_paths = [ln for p, ln in f.paths.items() if p.startswith("NET/Socket")]
        if want != "Socket" and socket_paths and f.nccl_net != "Socket":
            out.append(f"a channel runs over TCP sockets: {socket_paths[0].strip()}")
    gpus = declared.get("gpus_per_node")
    if gpus and not f.gpus_per_host:
        out.append(f"the partition declares gpus_per_node={gpus}, but no NCCL/RCCL line names "
                   "a host and its GPU (no device collective over NCCL/RCCL: hvdcore fell back "
                   "to host staging? NCCL_DEBUG=INFO reached the ranks?)")
    elif gpus and f.gpus_per_node != int(gpus):
        out.append(f"NCCL used {f.gpus_per_node} GPUs on a node, the partition declares "
                   f"gpus_per_node={gpus}")
    nics = declared.get("nics_per_node")
    if nics and f.nccl_net is None:
        out.append(f"expected nics_per_node={nics}: no NCCL/RCCL network line in the output")
    elif nics and f.nics and len(f.nics) != int(nics):
        out.append(f"NCCL/RCCL uses {len(f.nics)} NIC(s) {f.nics}, the partition declares "
                   f"nics_per_node={nics}: {f.nics_line.strip()}")
    elif nics and not f.nics and not f.nics_unshown_line:
        out.append(f"expected nics_per_node={nics}: no line in the output names NCCL/RCCL's "
                   f"NICs: {f.nccl_net_line.strip()}")
    mpi = declared.get("mpi_transport")
    if mpi and mpi not in f.mpi_transports:
        seen = "; ".join(f"{k}: {v.strip()}" for k, v in f.mpi_transports.items()) or "nothing"
        out.append(f"expected MPI transport {mpi!r}; the output shows {seen}")
    iface = declared.get("gloo_interface")
    if iface and f.gloo_interface != iface:
        out.append(f"expected the Gloo plane on interface {iface!r}; found "
                   f"{f.gloo_interface!r}: {f.gloo_line.strip() or 'no rendezvous line'}")
    return out


def unjudged(f: Fabric, declared: dict) -> list[str]:
    """Declarations the output can neither prove nor disprove, each with the line that says
    why (reported by the check, not failed)."""
    nics = declared.get("nics_per_node")
    if nics and f.nccl_net and not f.nics and f.nics_unshown_line:
        return [f"nics_per_node={nics} not judged: the network plugin does not print its NIC "
                f"count: {f.nics_unshown_line.strip()}"]
    return []
