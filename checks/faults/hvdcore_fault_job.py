"""Opt-in fault-injection check: a 2-node hvdcore training job that must finish or fail clearly.

Not part of the nightly suite: it lives in ``checks/faults/``, which ``checks/run_suite.sh``
(``-c checks/``, not recursive: ``check_search_recursive`` is off in every config) does not
search, and it carries the tag ``fault-injection``. Run it by naming the file::

    reframe -C checks/config/slurm.py --system generic:cpu \\
        -c checks/faults/hvdcore_fault_job.py -r

It trains the fault suite's program ``tests/faults/programs/train.py`` (hvdcore's NumPy API: a
grouped allreduce of the gradients per step, a checkpoint every ``ckpt_every`` steps) on the
partition's ``2_nodes`` scale for ``steps`` steps of at least ``step_sleep`` seconds. Left alone
it passes: every rank finishes with the same state, and rank 0's last checkpoint is the state a
one-process run computes (to float rounding: MPI may add the ranks' gradients in another order).
``tests/faults/reframe_check.py`` (issue 8, the ReFrame rows of the fault suite) kills one
node's ranks or ``scancel``s the job while it runs; the check must then end FAILED within
seconds, not time out, with a reason that names the dead rank or the cancelled job (see
``hvdcore_checks/failures.py``).

Imports: ReFrame puts only this file's directory on the path while loading it, so the two
modules from elsewhere are loaded by path with ReFrame's own loader
(``reframe.utility.import_module_from_file``): ``checks/hvdcore_checks`` and, for the reference,
the training program. The job runs the program as ``python3 -m programs.train`` in its stage
directory, a copy of ``tests/faults`` (the ``sourcesdir``).
"""

import os
import re

import reframe as rfm
from reframe.core.builtins import run_after, sanity_function, variable
from reframe.core.exceptions import SanityError
from reframe.utility import import_module_from_file

CHECKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAULTS = os.path.join(os.path.dirname(CHECKS), "tests", "faults")

_lib = import_module_from_file(os.path.join(CHECKS, "hvdcore_checks"))
HvdcoreJobMixin, failure_reason, layout = _lib.HvdcoreJobMixin, _lib.failure_reason, _lib.layout

DONE = re.compile(r"^DONE (\d+) ([0-9a-f]{64})$", re.M)


def _reference_mismatch(ckpt_dir, size):
    """What differs between rank 0's newest checkpoint and the same training computed in one
    process; None when they agree, or when ReFrame's Python has no NumPy to compute it.

    They agree to float rounding, not bit for bit: MPI may add the ranks' gradients in another
    order than the one-process loop (4 ranks: pairwise), so a relative 1e-5 is allowed (the
    ranks themselves must agree exactly: their DONE digests).
    """
    try:
        import numpy as np

        train = import_module_from_file(os.path.join(FAULTS, "programs", "train.py"),
                                        load_parents=True)
    except ImportError:
        return None
    found = train.ckpt.latest(ckpt_dir)
    if found is None:
        return f"no complete checkpoint in {ckpt_dir}"
    path, step, state = found
    want = train.reference_state(step, size)
    differs = [key for key in sorted(want)
               if not np.allclose(state[key], want[key], rtol=1e-5, atol=1e-12)]
    if differs:
        return (f"{os.path.basename(path)} (step {step}) differs from the one-process "
                f"reference in {differs}")
    return None


@rfm.simple_test
class HvdcoreFaultJob(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """2-node data-parallel training that every rank must finish with the same state, the
    one-process reference's to float rounding."""

    #: Training steps (0.05 s sleep each: 300 steps run ~20-40 s on 4 ranks).
    steps = variable(int, value=300)
    #: Seconds each step sleeps at least (keeps the job alive long enough to be faulted).
    step_sleep = variable(float, value=0.05)
    #: Rank 0 writes an atomic checkpoint every this many steps.
    ckpt_every = variable(int, value=10)
    valid_systems = ["*"]
    sourcesdir = FAULTS
    executable = "python3"
    time_limit = "10m"
    tags = {"hvdcore", "fault-injection"}  # opt-in: in no ci/nightly/production selection
    maintainers = ["hvdcore-team"]
    prerun_cmds = ["mkdir -p ckpt"]

    @run_after("init")
    def _environments(self):
        self.use_environments()
        self.descr = "hvdcore 2-node training for fault injection (opt-in)"

    @run_after("setup")
    def _place(self):
        fits = layout("2_nodes", self.ranks_per_node(),
                      int(self.part_extras.get("max_nodes", 1)))
        self.skip_if(isinstance(fits, str), str(fits))
        self.num_tasks, self.num_tasks_per_node, _ = fits
        self.request_node_resources(self.num_tasks_per_node)
        self.executable_opts = [
            "-m", "programs.train", "--ckpt-dir", "ckpt", f"--steps={self.steps}",
            f"--ckpt-every={self.ckpt_every}", f"--step-sleep={self.step_sleep}",
        ]
        self.record_launcher_exit()

    def _read(self, name):
        path = os.path.join(self.stagedir, name)
        try:
            with open(path, errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    @sanity_function
    def validate(self):
        out, err = self._read(self.job.stdout), self._read(self.job.stderr)
        exits = re.findall(r"^hvdcore-launcher-exit: (\d+)$", out, re.M)
        if not exits:
            raise SanityError("the job script ended before the launcher returned (job "
                              f"cancelled or killed): {failure_reason(err, out)}")
        if int(exits[-1]) != 0:
            raise SanityError(f"the launcher exited {exits[-1]}: {failure_reason(err, out)}")
        done = {int(r): d for r, d in DONE.findall(out)}
        if sorted(done) != list(range(self.num_tasks)):
            raise SanityError(f"ranks {sorted(done)} of {self.num_tasks} finished training")
        if len(set(done.values())) != 1:
            raise SanityError(f"the ranks' final states differ: {done}")
        differs = _reference_mismatch(os.path.join(self.stagedir, "ckpt"), self.num_tasks)
        if differs:
            raise SanityError(differs)
        return True
