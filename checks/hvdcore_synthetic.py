"""Synthetic CNN benchmark check: images/s per rank and in total at EESSI-style scales.

The replacement for ReFrame's ``hpctestlib`` Horovod checks (``hpctestlib.ml.pytorch`` /
``...ml.tensorflow`` Horovod CNN benchmarks) and the EESSI PyTorch/TensorFlow synthetic
tests, for sites leaving Horovod: the same experiment (ResNet-50, random data, images/s), run
with hvdcore and nothing downloaded at run time. ``torch`` runs
``examples/pytorch_synthetic_benchmark.py`` (a ResNet defined in the example), ``tensorflow``
runs ``examples/keras_synthetic_benchmark.py`` (``keras.applications.ResNet50(weights=None)``).
Variants, environments, module discovery and example lookup are those of the MNIST check
(``HvdcoreSyntheticCheck %scale=1_node %baseline.framework=torch %baseline.hvdcore_module=env``).

Settings: ``profile`` ``auto`` is ``gpu`` on partitions with GPUs (Horovod's own benchmark:
224 px, batch 32 per rank, 10 warm-up steps, 10 iterations of 10 steps) and ``cpu`` elsewhere
(64 px, batch 8, 5 warm-up steps, 5 iterations of 5 steps: a CPU node needs minutes per
iteration at 224 px); every setting can be overridden alone (``-S image_size=224``).

Sanity: every rank finished, rank 0's summary line reports the launched ranks and a
per-rank line for each, every rate is positive, the timed window is at least
``min_window_s`` and the scaling efficiency is at most ``max_valid_efficiency`` (105 %) widened
by ``noise_sigmas`` (3) x the two runs' combined timing noise, each run's noise being the
relative standard deviation of its per-iteration images/s (``images_per_sec_per_rank_conf`` /
1.96 / images/s; ``hvdcore_checks/validity.py``). More is an invalid measurement: the scaled
run and its baseline were not the same experiment.

Performance: ``total_images_per_sec``, ``images_per_sec_per_rank`` (img/s, mean over
iterations; absolute, judged against the partition's recorded references, see
checks/README.md; reported only where none is recorded) and, for the scaled check,
``efficiency`` (%): per-rank images/s / the 1-rank baseline's (fixture ``SyntheticBaseline``,
same settings and threads per rank), information only (``references.INFORMATION_ONLY``: the
baseline is an earlier job; a recorded value is shown without its bounds).
"""

import os
from dataclasses import dataclass

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import (
    fixture,
    parameter,
    performance_function,
    run_after,
    sanity_function,
    variable,
)

from hvdcore_checks import (
    ENV_PROVIDED,
    EXAMPLES_DIR,
    ScaledVariantMixin,
    hvdcore_modules,
    locate_examples,
)
from hvdcore_checks.examples import EXAMPLES_VAR
from hvdcore_checks.validity import (
    MAX_TIMING_NOISE,
    NOISE_SIGMAS,
    assert_valid_efficiency,
    short_window_message,
)

#: Rank 0's summary line (``examples/*_synthetic_benchmark.py``).
SUMMARY = (r"hvdcore-synthetic: framework=(?P<framework>\S+) model=(?P<model>\S+) "
           r"parameters=(?P<params>\d+) ranks=(?P<ranks>\d+) device=(?P<device>\S+) "
           r"batch_size=(?P<batch>\d+) image_size=(?P<image>\d+) timed_steps=(?P<steps>\d+) "
           r"timed_seconds=(?P<secs>\S+) images_per_sec_per_rank=(?P<ipr>\S+) "
           r"images_per_sec_per_rank_conf=(?P<ipr_conf>\S+) total_images_per_sec=(?P<ips>\S+) "
           r"total_images_per_sec_conf=(?P<ips_conf>\S+)")
#: One line per rank (its mean images/s over the timed iterations).
PER_RANK = r"hvdcore-synthetic-rank: rank=(?P<rank>\d+) images_per_sec=(?P<ips>\S+) "


@dataclass(frozen=True)
class SyntheticExample:
    """One framework's benchmark script and its default model."""

    script: str
    model: str


#: Framework (check parameter value) -> its example.
SYNTHETIC_EXAMPLES = {
    "torch": SyntheticExample("pytorch_synthetic_benchmark.py", "resnet50"),
    "tensorflow": SyntheticExample("keras_synthetic_benchmark.py", "ResNet50"),
}

#: Settings of each profile: image size, batch per rank, warm-up steps, iterations, steps each.
PROFILES = {
    "gpu": {"image_size": 224, "batch_size": 32, "num_warmup_batches": 10, "num_iters": 10,
            "num_batches_per_iter": 10},
    "cpu": {"image_size": 64, "batch_size": 8, "num_warmup_batches": 5, "num_iters": 5,
            "num_batches_per_iter": 5},
}


class SyntheticRun(rfm.RunOnlyRegressionTest, ScaledVariantMixin):
    """Base: one run of a framework's synthetic benchmark (not a test by itself)."""

    #: ``gpu`` (Horovod's settings), ``cpu`` (smaller images, fewer steps), or ``auto``: gpu
    #: where the partition has GPUs; the settings below override it one by one.
    profile = variable(str, value="auto")
    #: Model: ``resnet50``/``resnet101``/``resnet26``/``tiny`` (torch) or a
    #: ``keras.applications`` name (tensorflow); None: ResNet-50.
    model = variable(str, type(None), value=None)
    #: Channels of the torch ResNet's first stage (64: the published ResNet-50).
    width = variable(int, value=64)
    #: Square image side in pixels; None: the profile's (224 gpu, 64 cpu).
    image_size = variable(int, type(None), value=None)
    #: Images per rank per step; None: the profile's (32 gpu, 8 cpu).
    batch_size = variable(int, type(None), value=None)
    #: Steps before timing starts; None: the profile's (10 gpu, 5 cpu).
    num_warmup_batches = variable(int, type(None), value=None)
    #: Timed iterations; None: the profile's (10 gpu, 5 cpu).
    num_iters = variable(int, type(None), value=None)
    #: Steps per timed iteration; None: the profile's (10 gpu, 5 cpu).
    num_batches_per_iter = variable(int, type(None), value=None)
    #: Keras of the tensorflow variant: ``keras3`` or ``tf-keras``.
    keras = variable(str, value="keras3")
    #: CPU threads per rank; None: the partition's CPUs per rank, the same at every scale.
    threads = variable(int, type(None), value=None)
    #: Shortest timed window (slowest rank's seconds) that counts as a measurement.
    min_window_s = variable(float, value=2.0)
    valid_systems = ["*"]
    sourcesdir = EXAMPLES_DIR
    executable = "python3"
    time_limit = "30m"
    #: Whole nodes (``--exclusive``): throughput is not shared with other jobs.
    exclusive_access = True

    def settings(self) -> dict[str, int]:
        """The profile's settings with this test's overrides."""
        profile = self.profile
        if profile == "auto":
            profile = "gpu" if self.gpus_per_node() else "cpu"
        if profile not in PROFILES:
            raise ValueError(f"profile {self.profile!r}: expected auto, "
                             f"{', '.join(PROFILES)}")
        return {k: v if getattr(self, k) is None else getattr(self, k)
                for k, v in PROFILES[profile].items()}

    @run_after("setup")
    def _place(self):
        self.place_ranks()
        example = SYNTHETIC_EXAMPLES[self.framework]
        opts = [f"--model={self.model or example.model}",
                *(f"--{k.replace('_', '-')}={v}" for k, v in self.settings().items()),
                f"--threads={self.threads or self.num_cpus_per_task}"]
        opts.append(f"--width={self.width}" if self.framework == "torch"
                    else f"--keras={self.keras}")
        self.prerun_cmds = [*self.prerun_cmds, *locate_examples(example.script)]
        self.executable_opts = [f'"${EXAMPLES_VAR}/{example.script}"', *opts]
        self.record_launcher_exit()
        self.apply_recorded_references(
            None if isinstance(self, SyntheticBaseline) else self.scale, self.framework)

    def _field(self, name, conv=float):
        return sn.extractsingle(SUMMARY, self.stdout, name, conv, item=-1)

    def run_sane(self):
        """Sanity of one benchmark run (shared by the baseline and the scaling check)."""
        rates = sn.extractall(PER_RANK, self.stdout, "ips", float)
        return [
            self.assert_launcher_ok(),
            sn.assert_found(SUMMARY, self.stdout, msg="rank 0 printed no hvdcore-synthetic "
                            "summary line (see the job's stderr)"),
            sn.assert_eq(self._field("ranks", int), self.num_tasks,
                         msg="{0} ranks trained, {1} were launched"),
            sn.assert_eq(sn.count(rates), self.num_tasks,
                         msg="{0} per-rank lines for {1} ranks"),
            sn.assert_gt(sn.min(rates), 0, msg="a rank trained at {0} images/s"),
            sn.assert_ge(self._field("secs"), self.min_window_s,
                         msg=short_window_message(
                             "raise -S num_iters or -S num_batches_per_iter")),
        ]

    @sanity_function
    def validate(self):
        return sn.all(self.run_sane())

    @performance_function("img/s")
    def total_images_per_sec(self):
        return self._field("ips")

    @performance_function("img/s")
    def images_per_sec_per_rank(self):
        return self._field("ipr")


class SyntheticBaseline(SyntheticRun):
    """The 1-rank run of one framework and hvdcore (a fixture of the scaling check)."""

    framework = parameter(sorted(SYNTHETIC_EXAMPLES))
    hvdcore_module = parameter(hvdcore_modules())
    #: The baseline always runs 1 rank (a scale of ``hvdcore_checks/scales.py``).
    scale = variable(str, value="1_rank")

    @run_after("init")
    def _baseline_setup(self):
        if not self.is_fixture():
            self.select_environments()
        self.describe("synthetic", "synthetic CNN benchmark")


@rfm.simple_test
class HvdcoreSyntheticCheck(SyntheticRun):
    """Synthetic CNN throughput: one variant per framework, hvdcore module and scale."""

    scale = parameter(["2_ranks", "4_ranks", "1_node", "2_nodes", "4_nodes", "8_nodes",
                       "16_nodes"])
    baseline = fixture(SyntheticBaseline, scope="environment")
    #: The framework benchmarked; set from the baseline fixture's parameter (not to be set).
    framework = variable(str, value="torch")
    #: The hvdcore module under test, or ``env``; set from the baseline fixture's parameter
    #: (not to be set).
    hvdcore_module = variable(str, value=ENV_PROVIDED)
    #: Efficiency above this (%), widened by the runs' timing noise, is an invalid measurement.
    max_valid_efficiency = variable(float, value=105.0)
    #: Standard deviations of the two runs' combined timing noise that widen the bound.
    noise_sigmas = variable(float, value=NOISE_SIGMAS)
    #: Combined timing noise above which the two runs are no measurement (invalid).
    max_timing_noise = variable(float, value=MAX_TIMING_NOISE)
    #: Set by sanity (not to be set): the scaled run's and the baseline's combined timing noise.
    timing_noise = variable(float, type(None), value=None)

    @run_after("init")
    def _variant(self):
        self.follow_baseline()
        self.describe("synthetic", "synthetic CNN benchmark")

    def _baseline_field(self, name):
        # The fixture's output lives in its own stage directory.
        out = os.path.join(self.baseline.stagedir, self.baseline.job.stdout)
        return sn.extractsingle(SUMMARY, out, name, float, item=-1)

    def _efficiency(self):
        return sn.round(100.0 * self._field("ipr") / self._baseline_field("ipr"), 2)

    @sn.deferrable
    def _efficiency_valid(self):
        """Sanity: the efficiency is within its noise-widened bound (records the noise)."""
        # conf is 1.96 standard deviations of the per-iteration rates
        noises = [sn.evaluate(conf / 1.96 / ipr) for conf, ipr in (
            (self._field("ipr_conf"), self._field("ipr")),
            (self._baseline_field("ipr_conf"), self._baseline_field("ipr")))]
        return assert_valid_efficiency(self, sn.evaluate(self._efficiency()), noises)

    @sanity_function
    def validate(self):
        checks = self.run_sane()
        checks.append(self._efficiency_valid())
        return sn.all(checks)

    @performance_function("%")
    def efficiency(self):
        return self._efficiency()
