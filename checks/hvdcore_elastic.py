"""Elastic training check: a rank killed mid-training, the job goes on and finishes the training.

``HvdcoreElasticCheck`` runs ``examples/pytorch_mnist_elastic.py`` (torch, offline MNIST) twice
in one job, both under ``hvdcorerun``'s elastic launcher (``--min-np``/``--max-np``, one
worker per host, the hosts being the loopback addresses ``127.0.0.1``, ``127.0.0.2``, ...):

``plain``
    ``max_np`` workers (3), nothing fails: the uninterrupted run. Left out when the partition
    records its accuracy (``reference_accuracy``, or ``extras['elastic_reference_accuracy']``):
    a site that has run the check a few times knows it, and the job then costs one training.
``failure``
    the same training with ``--fail-at-step``: rank 1 SIGKILLs itself after step
    ``fail_at_step``; the launcher blacklists its host, the survivors roll back to the last
    commit and finish at ``min_np`` ranks (2).

Sanity (``hvdcore_checks/elastic.py``): both launchers exited 0; the plain run finished at
``max_np`` ranks with 0 resets, the failure run at ``min_np`` with exactly 1; every epoch of
both processed exactly ``train_samples`` distinct samples (the ``ElasticSampler``'s record);
each run's step count is the one the check computes from its own parameters (samples, batch,
ranks, and for the failure run the commit it rolled back to, which must be a commit point whose
processed samples match its committed steps); both accuracies are above ``min_accuracy``.

Performance (both judged everywhere, both can fail):

``resumed_after_s`` (s)
    from the killed rank's death (the time it wrote into its marker file just before the
    SIGKILL) to the end of rank 0's first training step after the reset; at most
    ``extras['elastic_max_resume_s']``, else ``max_resume_s`` (60 s).
``accuracy_gap``
    the uninterrupted run's test accuracy (or the recorded reference) minus the failure run's;
    at most ``max_accuracy_gap``
    (0.12): the rollback and the smaller job must train about as well as the uninterrupted
    job. This short training (4000 samples, 2 epochs) is far from converged: interrupted runs
    read 0.07-0.08 below the uninterrupted one here (0.79-0.81 vs 0.86-0.87; 4 runs), while
    the gradient averaging, momentum, learning rate and sampler after the reset were checked
    right; a diverging failure run (``-S failure_opts=--lr=3``) reads far above the bound.

Where it runs: partitions with the ``local`` scheduler only. The job's launcher is ReFrame's
``local`` launcher running ``hvdcorerun`` itself, which starts the workers on this node through
the loopback hosts. ``hvdcorerun``'s elastic launcher does take its hosts from a Slurm
allocation (one ``srun`` step per worker; ``tests/test_torch_rendezvous_slurm.py`` kills one
node's workers mid-training on the 2-node localhost Slurm), but this check does not declare a
Slurm case yet: its job script would need ``-H`` replaced by the allocation's nodes and the
killed rank's node chosen, which has not been run through ReFrame.

Tags ``elastic``, ``nightly``, ``production``, ``torch``. Fault injection for its proof of
failing (checks/README.md): ``FAULTS_ELASTIC_RESET_DELAY_S`` (the example sleeps that long in
its reset callback) makes ``resumed_after_s`` fail; ``-S failure_opts=--lr=3`` (a diverging
failure run) makes ``accuracy_gap`` fail.
"""

import os

import reframe as rfm
import reframe.core.runtime as rt
import reframe.utility.sanity as sn
from reframe.core.backends import getlauncher
from reframe.core.builtins import (
    performance_function,
    run_after,
    run_before,
    sanity_function,
    variable,
)
from reframe.core.exceptions import SanityError
from reframe.utility import typecheck as typ

from hvdcore_checks import EXAMPLES_DIR, MAINTAINERS, HvdcoreJobMixin, locate_examples
from hvdcore_checks.elastic import EXIT, SECTION, Expected, judge_runs
from hvdcore_checks.examples import EXAMPLES_VAR

SCRIPT = "pytorch_mnist_elastic.py"
#: Seconds from a death to training resumed that fail the check, where the partition says
#: nothing (``extras['elastic_max_resume_s']``). Here (2 shared cores, load 15) ~1-3 s.
MAX_RESUME_S = 60.0


@rfm.simple_test
class HvdcoreElasticCheck(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """An elastic MNIST training survives a SIGKILLed rank: complete, accurate, resumed fast."""

    descr = "hvdcore elastic training: a rank killed mid-training, vs an uninterrupted run"
    valid_systems = ["*"]
    sourcesdir = EXAMPLES_DIR
    executable = "$HVDCORERUN"
    time_limit = "15m"
    num_tasks = 1
    #: Training images (the first N of MNIST's training set), each epoch.
    train_samples = variable(int, value=4000)
    #: Epochs of both runs.
    epochs = variable(int, value=2)
    #: Images per rank per step.
    batch_size = variable(int, value=64)
    #: Single-rank learning rate (the example scales it by the job's size).
    lr = variable(float, value=0.1)
    #: ``state.commit()`` every N batches: the points a failure rolls back to.
    batches_per_commit = variable(int, value=10)
    #: Rank 1 SIGKILLs itself after this step of the failure run.
    fail_at_step = variable(int, value=15)
    #: Workers at the start, one per loopback host (``hvdcorerun --max-np``).
    max_np = variable(int, value=3)
    #: Workers after the death (``hvdcorerun --min-np``): the failure run finishes at this.
    min_np = variable(int, value=2)
    #: torch threads per rank.
    threads = variable(int, value=1)
    #: Both runs' test accuracies must exceed this (chance: 0.1).
    min_accuracy = variable(float, value=0.5)
    #: ``accuracy_gap`` (uninterrupted minus interrupted accuracy) above this fails.
    max_accuracy_gap = variable(float, value=0.12)
    #: None: ``extras['elastic_max_resume_s']``, else :data:`MAX_RESUME_S`.
    max_resume_s = variable(float, type(None), value=None)
    #: The uninterrupted run's test accuracy, recorded: the job then runs the failure run only.
    #: None: ``extras['elastic_reference_accuracy']``, else run the uninterrupted training too.
    reference_accuracy = variable(float, type(None), value=None)
    #: More options of the failure run only (fault injection: ``-S failure_opts=--lr=3``).
    failure_opts = variable(typ.List[str], value=[])

    @run_after("init")
    def _where(self):
        self.use_environments("torch")
        # hvdcorerun starts the workers itself: only where the job runs on the node it is on.
        local = [p.fullname for p in rt.runtime().system.partitions
                 if p.scheduler.registered_name == "local"]
        self.valid_systems = local  # none: no test case on this system
        self.tags |= {"hvdcore", "elastic", "torch", "nightly", "production"}
        self.maintainers = list(MAINTAINERS)

    @run_after("setup")
    def _program(self):
        if self.min_np >= self.max_np or self.min_np < 1:
            raise ValueError(f"min_np={self.min_np}, max_np={self.max_np}: "
                             "1 <= min_np < max_np expected")
        hosts = ",".join(f"127.0.0.{i + 1}:1" for i in range(self.max_np))
        launch = [f"--min-np={self.min_np}", f"--max-np={self.max_np}", "-H", hosts,
                  "python3", f'"${EXAMPLES_VAR}/{SCRIPT}"',
                  f"--train-samples={self.train_samples}", f"--epochs={self.epochs}",
                  f"--batch-size={self.batch_size}", f"--lr={self.lr}",
                  f"--batches-per-commit={self.batches_per_commit}",
                  f"--threads={self.threads}"]
        if self.reference_accuracy is None:
            ref = self.part_extras.get("elastic_reference_accuracy")
            self.reference_accuracy = None if ref is None else float(ref)
        plain = []
        if self.reference_accuracy is None:
            plain = [f'echo "{SECTION}plain"',
                     " ".join(["$HVDCORERUN", *launch, "--work-dir=elastic-plain"]),
                     'echo "hvdcore-elastic-exit: plain $?"']
        self.prerun_cmds = [
            *self.prerun_cmds, *locate_examples(SCRIPT), "mkdir -p elastic-plain elastic-failure",
            *plain, f'echo "{SECTION}failure"',
        ]
        self.executable_opts = [*launch, f"--fail-at-step={self.fail_at_step}",
                                "--work-dir=elastic-failure", *self.failure_opts]
        self.postrun_cmds = ['echo "hvdcore-elastic-exit: failure $?"', *self.postrun_cmds]
        bound = self.max_resume_s
        if bound is None:
            bound = float(self.part_extras.get("elastic_max_resume_s", MAX_RESUME_S))
        self.reference = {"*": {"resumed_after_s": (bound, None, 0.0, "s"),
                                "accuracy_gap": (self.max_accuracy_gap, None, 0.0, "")}}

    @run_before("run")
    def _local_launcher(self):
        # hvdcorerun is the job's launcher: ReFrame's only runs it, once.
        self.job.launcher = getlauncher("local")()

    def _judged(self):
        if not hasattr(self, "_runs"):
            with open(os.path.join(self.stagedir, sn.evaluate(self.stdout))) as f:
                text = f.read()
            exp = Expected(self.train_samples, self.batch_size, self.epochs, self.max_np,
                           self.min_np, self.batches_per_commit, self.min_accuracy)
            names = ("failure",) if self.reference_accuracy is not None else ("plain",
                                                                                 "failure")
            self._runs, self._errors = judge_runs(text, exp, names)
        return self._runs, self._errors

    @sanity_function
    def validate(self):
        _, errors = self._judged()
        if errors:
            raise SanityError("; ".join(errors))
        return sn.assert_found(EXIT.pattern, self.stdout)

    @performance_function("s")
    def resumed_after_s(self):
        return self._judged()[0]["failure"].resumed_after_s

    @performance_function("")
    def accuracy_gap(self):
        runs = self._judged()[0]
        plain = (runs["plain"].accuracy if self.reference_accuracy is None
                 else self.reference_accuracy)
        return round(plain - runs["failure"].accuracy, 4)
