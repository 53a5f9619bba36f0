"""hvdcore.torch.rendezvous: torch.distributed's group formed over MPI, bounded failures named on
every rank, the address choice (hvdcore.netaddr) and the duplicate-GPU check.

Multi-rank tests launch tests/programs/torch_rendezvous.py under mpirun; the pure functions run on
this machine's real interfaces and on hand-written reports. The 2-node Slurm run is in
test_torch_rendezvous_slurm.py.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil

import pytest
from conftest import program, run_mpi

from hvdcore.config import load
from hvdcore.errors import ConfigError, RendezvousError
from hvdcore.netaddr import (
    HostReport,
    IfaceRule,
    Interface,
    choose_address,
    iface_rule,
    local_host,
    local_interfaces,
)

torch = pytest.importorskip("torch")

LO = Interface("lo", "127.0.0.1", "255.0.0.0", loopback=True)


def _host(rank: int, host: str, *ifaces: Interface, **kw: str) -> HostReport:
    return HostReport(rank, host, "", (LO, *ifaces), **kw)  # type: ignore[arg-type]


def _rendezvous_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "RendezvousError:" in line]


# -- multi-rank: the group works -------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.torch
def test_gloo_group_allreduce_and_subgroup(world_size: int) -> None:
    proc = run_mpi(world_size, [program("torch_rendezvous.py"), "ok"], timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(" OK sum=") == world_size, proc.stdout
    n = world_size
    want = [float(i * n + n * (n - 1) // 2) for i in range(4)]
    assert proc.stdout.count(f"OK sum={want}") == world_size, proc.stdout
    described = [ln for ln in proc.stdout.splitlines() if "torch.distributed rendezvous tcp://" in ln]
    assert len(described) == world_size, proc.stdout
    # One host: loopback, and every rank's Gloo on the loopback interface.
    assert all("tcp://127." in ln and "all ranks on one host" in ln for ln in described), described


# -- multi-rank: failures are bounded and named on every rank -------------------------------
@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.parametrize("np", [2, 3])
def test_unreachable_master_addr_fails_on_every_rank(np: int) -> None:
    # TEST-NET-2 (RFC 5737): not an address of this machine, routed nowhere useful.
    proc = run_mpi(np, [program("torch_rendezvous.py"), "fail"],
                   env={"MASTER_ADDR": "198.51.100.1", "HVDCORE_RENDEZVOUS_TIMEOUT": "5"},
                   timeout=60)
    lines = _rendezvous_lines(proc.stdout)
    assert proc.returncode != 0
    assert sorted(int(ln.split(":")[0].split()[1]) for ln in lines) == list(range(np)), \
        proc.stdout + proc.stderr
    for ln in lines:
        assert "rank 0 on " in ln and "198.51.100.1:" in ln and "MASTER_ADDR" in ln, ln
        assert "HVDCORE_RENDEZVOUS_TIMEOUT" in ln and "What to do" in ln, ln


@pytest.mark.mpi
@pytest.mark.torch
def test_busy_master_port_fails_on_every_rank() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_mpi(2, [program("torch_rendezvous.py"), "fail"],
                       env={"MASTER_PORT": str(port), "HVDCORE_RENDEZVOUS_TIMEOUT": "5"},
                       timeout=60)
    lines = _rendezvous_lines(proc.stdout)
    assert proc.returncode != 0 and len(lines) == 2, proc.stdout + proc.stderr
    assert all(f"cannot listen on port {port} (MASTER_PORT)" in ln for ln in lines), lines


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mpirun"),
                    reason="moving a rank into its own network namespace needs root")
def test_rank_without_network_is_named_on_every_rank() -> None:
    """The last rank leaves the network after MPI started (unshare(CLONE_NEWNET)): it counts as
    another host, cannot reach rank 0's address, and every rank says so."""
    proc = run_mpi(3, [program("torch_rendezvous.py"), "isolate"],
                   env={"HVDCORE_RENDEZVOUS_TIMEOUT": "5", "OMPI_MCA_btl": "self,vader"},
                   timeout=60)
    lines = _rendezvous_lines(proc.stdout)
    assert proc.returncode != 0 and len(lines) == 3, proc.stdout + proc.stderr
    for ln in lines:
        assert "connecting to rank 0's store: rank 2 on " in ln, ln
        assert re.search(r"cannot connect to [\d.]+:\d+", ln), ln
        assert "rank 0 on" not in ln and "rank 1 on" not in ln, ln
        assert "ranks [2] have no address on" in ln, ln


# -- the address choice on this machine's interfaces ------------------------------------------
def test_local_interfaces_are_real() -> None:
    found = local_interfaces()
    assert any(i.loopback and i.address.startswith("127.") for i in found), found
    for i in found:
        assert i.name in {n for _, n in __import__("socket").if_nameindex()}
        ipaddress.IPv4Address(i.address)


def test_choice_on_this_machine() -> None:
    found = local_interfaces()
    host, machine = local_host()
    me = HostReport(0, host, machine, found)
    one = choose_address([me, HostReport(1, host, machine, found)])
    assert one.address.startswith("127.") and one.hosts == 1
    twin = HostReport(1, host + "[SLURM_NODEID=1]", machine, found)
    remote = [i for i in found if not i.loopback]
    if not remote:
        with pytest.raises(RendezvousError, match="no non-loopback IPv4 address"):
            choose_address([me, twin])
        return
    two = choose_address([me, twin])
    assert two.address == remote[0].address and two.interface == remote[0].name
    assert two.hosts == 2 and "shared by every rank" in two.reason
    assert two.gloo_ifaces == (remote[0].name, remote[0].name)


def test_slurm_node_id_makes_another_host() -> None:
    assert local_host({"SLURM_NODEID": "1"})[0].endswith("[SLURM_NODEID=1]")
    assert local_host({"SLURM_NODEID": "0"}) != local_host({"SLURM_NODEID": "1"})
    assert local_host({}) == local_host({})


# -- the address choice on hand-written reports -----------------------------------------------
def test_one_host_is_loopback() -> None:
    eth = Interface("eth0", "10.0.0.1")
    c = choose_address([_host(0, "n1", eth), _host(1, "n1", eth)])
    assert (c.address, c.interface, c.hosts, c.gloo_ifaces) == ("127.0.0.1", "lo", 1,
                                                                ("lo", "lo"))


def test_several_hosts_pick_the_shared_subnet() -> None:
    # Rank 0's first interface (a private docker-like bridge) reaches nobody; ib0's subnet is
    # shared by every host, even though the other hosts call the interface differently.
    reports = [
        _host(0, "n1", Interface("docker0", "172.17.0.1", "255.255.0.0"),
              Interface("eth0", "192.168.1.10"), Interface("ib0", "10.1.0.10", "255.255.0.0")),
        _host(1, "n1", Interface("ib0", "10.1.0.10", "255.255.0.0")),
        _host(2, "n2", Interface("eth0", "192.168.7.3"), Interface("ibp1", "10.1.3.4",
                                                                    "255.255.0.0")),
        _host(3, "n3", Interface("ib0", "10.1.9.9", "255.255.0.0")),
    ]
    c = choose_address(reports)
    assert (c.address, c.interface, c.hosts) == ("10.1.0.10", "ib0", 3)
    assert "10.1.0.0/16 is shared by every rank" in c.reason
    assert c.gloo_ifaces == ("ib0", "ib0", "ibp1", "ib0")


def test_no_shared_subnet_takes_the_best_and_says_who_lacks_it() -> None:
    reports = [_host(0, "n1", Interface("eth0", "10.0.0.1"), Interface("eth1", "10.0.1.1")),
               _host(1, "n2", Interface("eth0", "10.0.1.2")),
               _host(2, "n3", Interface("eth0", "10.0.2.3"))]
    c = choose_address(reports)
    assert c.address == "10.0.1.1" and "ranks [2] have no address on 10.0.1.0/24" in c.reason
    assert c.gloo_ifaces == ("eth1", "eth0", None)


def test_master_addr_wins() -> None:
    eth = Interface("eth0", "10.0.0.1")
    reports = [_host(0, "n1", eth), _host(1, "n2", Interface("eth0", "10.0.0.2"))]
    c = choose_address(reports, master_addr="10.0.0.1")
    assert (c.address, c.interface, c.reason) == ("10.0.0.1", "eth0", "MASTER_ADDR is set")
    c = choose_address([_host(0, "n1", eth), _host(1, "n1", eth)], master_addr="10.0.0.1")
    assert c.address == "10.0.0.1"  # even on one host
    c = choose_address(reports, master_addr="203.0.113.5")
    assert c.address == "203.0.113.5" and c.interface is None
    assert "not an address of rank 0's interfaces" in c.reason


def test_iface_knob_wins() -> None:
    reports = [_host(0, "n1", Interface("eth0", "10.0.0.1"), Interface("ib0", "10.9.0.1")),
               _host(1, "n2", Interface("eth0", "10.0.0.2"), Interface("ib0", "10.9.0.2"),
                     gloo_request="ib0")]
    rule = IfaceRule("ib0", "HVDCORE_GLOO_IFACE")
    c = choose_address(reports, rule=rule)
    assert (c.address, c.interface) == ("10.9.0.1", "ib0")
    assert c.reason.startswith("HVDCORE_GLOO_IFACE=ib0 ")
    assert c.gloo_ifaces == ("ib0", "ib0")
    # On one host the knob still chooses the interface (the user asked for it).
    same = [_host(0, "n1", Interface("eth0", "10.0.0.1")), _host(1, "n1")]
    c = choose_address(same, rule=IfaceRule("eth0", "HVDCORE_GLOO_IFACE"))
    assert c.address == "10.0.0.1"


def test_user_gloo_socket_ifname_is_left_alone() -> None:
    reports = [_host(0, "n1", Interface("eth0", "10.0.0.1")),
               _host(1, "n2", Interface("eth0", "10.0.0.2"), gloo_env="eth0")]
    assert choose_address(reports).gloo_ifaces == ("eth0", None)


def test_iface_rule_sources_and_nccl_syntax() -> None:
    assert iface_rule("ib0", "HOROVOD_GLOO_IFACE", {"GLOO_SOCKET_IFNAME": "eth0"}) == \
        IfaceRule("ib0", "HOROVOD_GLOO_IFACE")
    assert iface_rule("", "default", {"GLOO_SOCKET_IFNAME": "eth0",
                                      "NCCL_SOCKET_IFNAME": "ib"}).source == "GLOO_SOCKET_IFNAME"
    nccl = iface_rule("", "default", {"NCCL_SOCKET_IFNAME": "ib"})
    assert nccl is not None and nccl.matches("ib0") and nccl.matches("ibp1s0")
    assert not nccl.matches("eth0")
    assert not IfaceRule("^docker,lo", "NCCL_SOCKET_IFNAME", True).matches("docker0")
    assert IfaceRule("^docker,lo", "NCCL_SOCKET_IFNAME", True).matches("eth0")
    assert not IfaceRule("=ib", "NCCL_SOCKET_IFNAME", True).matches("ib0")
    assert not IfaceRule("eth", "GLOO_SOCKET_IFNAME").matches("eth0")  # Gloo: exact names
    assert iface_rule("", "default", {}) is None


def test_no_candidate_is_a_clear_error() -> None:
    reports = [_host(0, "n1"), _host(1, "n2", Interface("eth0", "10.0.0.2"))]
    with pytest.raises(RendezvousError, match=r"ranks run on 2 hosts but rank 0 on n1 has no "
                       r"non-loopback IPv4 address \(lo 127.0.0.1/8\); set MASTER_ADDR"):
        choose_address(reports)
    with pytest.raises(RendezvousError, match=r"HVDCORE_GLOO_IFACE=ib0 matches none of rank 0's "
                       r"interfaces on n1 \(lo 127.0.0.1/8, eth0 10.0.0.1/24\)"):
        choose_address([_host(0, "n1", Interface("eth0", "10.0.0.1")), _host(1, "n2")],
                       rule=IfaceRule("ib0", "HVDCORE_GLOO_IFACE"))


# -- knobs ---------------------------------------------------------------------------------
def test_knobs() -> None:
    cfg = load({"HOROVOD_GLOO_IFACE": "ib0", "HVDCORE_RENDEZVOUS_TIMEOUT": "7.5"})
    assert (cfg.gloo_iface, cfg.source("gloo_iface"), cfg.rendezvous_timeout) == \
        ("ib0", "HOROVOD_GLOO_IFACE", 7.5)
    assert load({}).rendezvous_timeout == 120.0
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match="HVDCORE_RENDEZVOUS_TIMEOUT"):
            load({"HVDCORE_RENDEZVOUS_TIMEOUT": bad})


# -- ranks sharing a GPU -------------------------------------------------------------------
def test_duplicate_devices_decision() -> None:
    from hvdcore.torch.rendezvous import DeviceReport, duplicate_devices

    def dev(rank: int, host: str, gpu: str, machine: str = "") -> DeviceReport:
        return DeviceReport(rank, host, machine, gpu, "cuda:0")

    same_uuid = [dev(0, "n1", "GPU-aa"), dev(1, "n1", "GPU-aa"), dev(2, "n1", "GPU-bb")]
    assert duplicate_devices(same_uuid) == {"GPU-aa on n1": [0, 1]}
    # The same index on different hosts is two GPUs; the same uuid is one GPU wherever it is.
    assert duplicate_devices([dev(0, "n1", "GPU 0"), dev(1, "n2", "GPU 0")]) == {}
    assert duplicate_devices([dev(0, "n1", "GPU 0", "m1"), dev(1, "n1", "GPU 0", "m2")]) == {}
    assert duplicate_devices([dev(0, "n1", "GPU 0"), dev(1, "n1", "GPU 0")]) == \
        {"GPU 0 on n1": [0, 1]}
    assert duplicate_devices([dev(0, "n1[SLURM_NODEID=0]", "GPU-aa"),
                              dev(1, "n1[SLURM_NODEID=1]", "GPU-aa")]) == \
        {"GPU-aa on n1[SLURM_NODEID=0], n1[SLURM_NODEID=1]": [0, 1]}
    assert duplicate_devices([None, dev(1, "n1", "GPU-aa"), None]) == {}
    assert duplicate_devices([None, None]) == {}
