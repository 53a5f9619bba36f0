"""hvdcorerun: start an hvdcore job on N ranks with the MPI (or Slurm) that is installed.

Usage::

    hvdcorerun -np 4 python train.py
    hvdcorerun -np 8 -H node1:4,node2:4 -- python train.py --epochs 3
    hvdcorerun -np 8 --hostfile hosts.txt --fusion-threshold-mb 32 python train.py
    hvdcorerun --check-build [--json] [--require mpi,torch,nccl]
    python -m hvdcore.runner ...            (same program)

Which launcher
    Outside Slurm, an ``mpirun`` command for the MPI found on PATH (``mpirun``, else
    ``mpiexec``): Open MPI or MPICH/Intel MPI, recognised from ``mpirun --version``. Without
    ``-H``/``--hostfile`` every rank runs on this host (``localhost:N`` slots, so more ranks than
    cores is allowed); with hosts, ``-np`` must not exceed their slots. Open MPI gets
    ``--bind-to none --map-by slot`` (deep-learning ranks are multi-threaded; change it with
    ``--binding-args``) and, as root, ``--allow-run-as-root``.
    Inside a Slurm allocation (``SLURM_JOB_ID`` set) and without hosts: ``srun --mpi=pmix
    --kill-on-bad-exit=1 -n N`` (``--slurm-mpi`` or ``$SLURM_MPI_TYPE`` choose another PMI; N
    defaults to the allocation's tasks). ``--launcher mpirun|srun`` forces one.
    ``-p PORT``/``-i FILE``/``--ssh-args`` go to mpirun's ssh as horovodrun's (Open MPI
    ``-mca plm_rsh_args``, Hydra ``-bootstrap-exec-args``).
    Each output line starts with its rank, as horovodrun's: Open MPI ``--tag-output``
    (``[1,R]<stdout>:``; hvdcorerun joins a rank's writes into whole lines, one tag each),
    Hydra ``-l``, srun ``--label``; ``--no-tag-output`` leaves the lines untagged.
    ``--verbose`` prints the exact command (shell-quoted) on stderr before running it;
    ``--dry-run`` prints it on stdout and runs nothing.

More horovodrun flags
    ``--config-file FILE``: horovodrun's YAML settings (``controller``, ``params``, ``timeline``,
    ``stall_check``, ``library_options``, ``logging``, ``autotune``); flags on the command line
    win wherever they stand; unknown keys are ignored with a note (needs PyYAML).
    ``--output-filename DIR``: Open MPI ``--output-filename``, Hydra ``-outfile-pattern``,
    ``--gloo`` and elastic jobs ``DIR/rank.N/stdout|stderr``. ``-prefix-timestamp``: Open MPI
    ``--timestamp-output``, ``--gloo`` and elastic jobs the time before each tag. ``--tcp``:
    ``NCCL_IB_DISABLE=1`` (Open MPI also ``-mca pml ob1 -mca btl ^openib``). The
    ``--autotune*`` flags are knobs (above). ``--mpi-threads-disable``,
    ``--num-nccl-streams``, ``--thread-affinity`` and the log timestamp switches are accepted
    with no effect and a note saying why; ``--jsrun`` is refused (no LSF launcher).

Hostfile
    One host per line: ``node1 slots=4`` (Open MPI/Horovod), ``node1:4`` or ``node1`` (1 slot);
    ``#`` comments. A bad line is reported as ``file:line``.

Environment every rank receives
    * The launcher's own environment (Open MPI forwards it by name, ``-x NAME``, to remote
      hosts, as horovodrun, but ``BASH_FUNC_*``, ``OLDPWD``, ``*CUDA_VISIBLE_DEVICES``,
      ``*_SECRET_KEY``, ``PWD``, ``SHLVL``, ``HOSTNAME``, ``SSH_*``; Hydra and srun forward
      everything).
    * ``HVDCORE_<NAME>=<value>`` for every tuning flag given (table below). Flags win over
      ``HVDCORE_*`` already set, which win over ``HOROVOD_*`` aliases, which win over defaults.
      The launcher checks every value, and every ``HVDCORE_*``/``HOROVOD_*`` variable in its
      environment, with the same rules as ``hvdcore.init()``: a bad one is a usage error here.
    * ``THP_MEM_ALLOC_ENABLE=1``, or the launcher environment's value where it sets one
      (exported by name on the command line, remote hosts included): PyTorch's CPU allocator
      then asks for transparent huge pages for tensors of 2 MiB and more, as NumPy does for
      its large arrays. Where the kernel gives huge pages on request only
      (``/sys/kernel/mm/transparent_hugepage/enabled`` reads ``madvise``), MPI moves
      tensors on 4 KiB pages slower (16 MiB in place: 1.14-1.16x the time on the 2-core test
      VM). ``THP_MEM_ALLOC_ENABLE=0 hvdcorerun ...`` turns it off. Under ``srun`` or a plain
      ``mpirun``, export it in the job script.
    * ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=134217728:``
      ``glibc.malloc.trim_threshold=268435456``, or the launcher environment's value where it
      sets one (an empty value turns it off): Open MPI's large allreduces allocate a scratch
      buffer of up to the message size per call, which glibc otherwise maps and page-faults in
      afresh every time; with it, scratch buffers below 128 MiB are reused and larger ones come
      on huge pages (allreduces of 32-128 MiB at 2 ranks: 0.31-0.39x the time on the 2-core
      test VM; ``benchmarks/malloc_tunables.py``). Up to 256 MiB of freed memory per rank stays
      resident. Under ``srun`` or a plain ``mpirun``, ``hvd.init()`` sets the two thresholds
      itself unless ``GLIBC_TUNABLES`` is set; export the variable for the huge pages too.
    * From the MPI launcher: Open MPI ``OMPI_COMM_WORLD_RANK``, ``OMPI_COMM_WORLD_SIZE``,
      ``OMPI_COMM_WORLD_LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_SIZE``, ``PMIX_RANK``; MPICH/Intel
      MPI ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``; srun ``SLURM_PROCID``,
      ``SLURM_LOCALID``, ``SLURM_NTASKS``, ``PMIX_RANK``.

    hvdcore itself reads only ``HVDCORE_*`` (and ``HOROVOD_*`` aliases), once, at
    ``hvdcore.init()``; rank, size, local rank/size and cross rank/size come from MPI
    (``MPI_COMM_WORLD`` and ``MPI_Comm_split_type(SHARED)``), not from the variables above, so
    any launcher that starts an MPI job works (``mpirun python train.py`` too).

Gloo jobs (``--gloo``) and other hosts
    No MPI: hvdcorerun starts every rank itself and hosts their rendezvous. A host that names
    this machine (``localhost``, ``127.*``, its own name or address) runs its ranks as local
    processes; any other over ``ssh -o BatchMode=yes -o StrictHostKeyChecking=no`` with
    ``-p``/``--ssh-port``, ``-i``/``--ssh-identity-file`` and ``--ssh-args '...'`` (more ssh
    options, e.g. ``-J login1``). A remote rank gets the launcher's working directory and whole
    environment (not ``BASH_FUNC_*``, ``OLDPWD``, ``*CUDA_VISIBLE_DEVICES``, ``*_SECRET_KEY``,
    as horovodrun) and ends when the launcher stops it or ends.
    ``--network-interfaces IFACE[,IFACE]``: Gloo's interfaces on every host, the rendezvous on
    the first (under mpirun, as horovodrun: ``NCCL_SOCKET_IFNAME`` and Open MPI's
    ``-mca btl_tcp_if_include``).

Elastic jobs (``--min-np`` or ``--host-discovery-script``; ``--max-np`` alone is not one)
    The Gloo controller, no MPI: once ``-np`` (default ``--min-np``) slots are listed,
    hvdcorerun starts one worker per usable slot up to ``--max-np``, hosts their rendezvous
    and decides who is in the job. A worker that fails blacklists its host
    (``--blacklist-cooldown-range MIN MAX``, 1 <= MIN, MAX <= 3600, lets it back after a
    cooldown of MIN doubled at each failure plus jitter, at most MAX); the survivors roll back
    to their last ``state.commit()`` and go on in process while at least ``--min-np`` remain
    (below it they wait up to ``--elastic-timeout`` seconds for hosts). If no worker of the
    last generation is left to broadcast the state, the job fails. The discovery script, a
    shell command run about once a second (``sh disc.sh`` works), prints ``host:slots`` (or
    ``host`` with ``--slots-per-host``) per line; new hosts and slots join at the next commit,
    hosts or slots no longer listed leave there. If its first run fails the job fails; later
    failures are warnings and the job keeps its hosts. ``--reset-limit N`` ends the job
    instead of a reset after N. Without a script, ``-H``/``--hostfile`` (default
    ``localhost`` with ``--max-np``, else ``-np``, else ``--min-np`` slots) are the hosts.
    The script uses ``hvd.elastic`` (the manual's elastic page); output lines are prefixed
    ``[N]<stdout>:``, N a worker's first rank; ``--output-filename DIR`` also writes
    ``DIR/rank.N/stdout|stderr``. ``--dry-run`` prints the plan and starts no worker.

Exit code and signals
    The job's exit code is passed on (a rank killed by signal N gives 128+N). SIGINT, SIGTERM
    and SIGHUP sent to hvdcorerun are forwarded to mpirun/srun, which stops the ranks; a third
    signal kills the launcher child. When a rank fails, the last stderr line names it, e.g.
    ``hvdcorerun: job failed: rank 1 exited with exit code 3 (mpirun exit code 3)``.
    Usage errors (bad flag or value, -np above the slots, malformed hostfile line, no command,
    no MPI launcher on PATH) print one line and exit 2; ``--require`` misses exit 1.
    When the reader of hvdcorerun's own output goes away (``hvdcorerun -cb | head -3``) it
    ends quietly: 141, a shell's code for a writer killed by SIGPIPE (0 for --help and
    --version when argparse dropped the write itself).

Capability report (``--check-build``)
    Horovod's layout (Available Frameworks / Controllers / Tensor Operations) plus devices and
    the GPU tensor path; ``[X]`` = built and usable here, ``[ ]`` with the reason below it.
    ``--json`` prints every field. ``--require a,b`` exits 1 naming each item that is not built;
    ``--require-available a,b`` also needs it usable on this node (a visible GPU for nccl/cuda).
    Names: torch, tensorflow, keras, mpi, gloo, nccl, ddl, ccl, cuda, rocm, cuda-aware-mpi.
"""

# The package holds no code: its docstring is the manual (``hvdcorerun --help`` prints it).
# The program is hvdcore.runner.cli:main (also ``python -m hvdcore.runner``).
__all__: list[str] = []
