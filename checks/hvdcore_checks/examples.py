"""The MNIST examples the scaling check trains, their shared result line, and where a job finds them.

Both examples (``examples/pytorch_mnist.py`` for ``torch``, ``examples/keras_mnist.py`` for
``tensorflow``) end with one line from rank 0 in the same format::

    hvdcore-mnist: ranks=2 epochs=1 test_accuracy=0.9512 images_per_sec=812.3 images_per_sec_per_rank=406.2 timed_steps=70 timed_seconds=5.516 timing_noise=0.0874

:data:`RESULT_PATTERN` parses it. Which copy of an example a job runs is decided in the job
script (:func:`locate_examples`): the examples an installed hvdcore module ships
(``$EBROOTHVDCORE/share/hvdcore/examples``, ``modules/install.sh prefix`` installs them there;
or ``$EBROOTHVDCORE/examples``), else the repository's copy that ReFrame stages with the check.

    >>> MNIST_EXAMPLES["tensorflow"].script
    'keras_mnist.py'
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = [
    "EXAMPLES_DIR",
    "EXAMPLES_VAR",
    "INSTALLED_EXAMPLE_DIRS",
    "MNIST_EXAMPLES",
    "MnistExample",
    "PEER_PATTERN",
    "RESULT_PATTERN",
    "locate_examples",
]

#: The repository's examples/ (staged into every MNIST job's stage directory).
EXAMPLES_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples"
)

#: The result line of every MNIST example (named groups: ranks, epochs, acc, ips, ipr, steps,
#: secs: the timed steps and the slowest rank's timed seconds; noise: the largest rank's
#: ``hvdcore.timing.timing_noise``, absent from examples older than it).
RESULT_PATTERN = (r"hvdcore-mnist: ranks=(?P<ranks>\d+) epochs=(?P<epochs>\d+) "
                  r"test_accuracy=(?P<acc>\S+) images_per_sec=(?P<ips>\S+) "
                  r"images_per_sec_per_rank=(?P<ipr>\S+) timed_steps=(?P<steps>\d+) "
                  r"timed_seconds=(?P<secs>\S+)(?: timing_noise=(?P<noise>\S+))?")

#: The result line of a peer trained in the same job: the torch DDP peer
#: (``examples/pytorch_mnist_ddp.py``, ``ddp-mnist:``) or the Keras example's raw mpi4py peer
#: (``examples/keras_mnist.py --mode mpi``, ``mpi-mnist:``).
PEER_PATTERN = (r"(?:ddp|mpi)-mnist: backend=(?P<backend>\S+) ranks=(?P<ranks>\d+) "
                r"test_accuracy=(?P<acc>\S+) images_per_sec=(?P<ips>\S+) "
                r"images_per_sec_per_rank=(?P<ipr>\S+) timed_steps=(?P<steps>\d+) "
                r"timed_seconds=(?P<secs>\S+)")

#: Shell variable of the job script holding the examples directory it runs from.
EXAMPLES_VAR = "MNIST_EXAMPLES"

#: Where an installed hvdcore (``$EBROOTHVDCORE``, set by its module) keeps examples, in order.
INSTALLED_EXAMPLE_DIRS = ("share/hvdcore/examples", "examples")


@dataclass(frozen=True)
class MnistExample:
    """One framework's MNIST example and the arguments the check gives it."""

    script: str
    #: Single-process learning rate (the example scales it by the number of ranks).
    lr: float
    #: Optimizer steps per epoch and rank.
    max_steps_per_epoch: int
    #: Epochs (each epoch's timed part is barrier to barrier; evaluation is not timed).
    epochs: int = 1
    #: Steps left out of the throughput measurement (tracing, allocator and cache warm-up).
    timing_warmup_steps: int = 10
    #: The peer trained in the same job right after hvdcore's run, if any.
    peer_script: str | None = None
    #: The performance variable of hvdcore's images/s over the peer's.
    peer_variable: str = "ddp_ratio"
    #: Arguments of the peer besides the shared ones (batch, lr, seed, threads, warm-up).
    peer_args: tuple[str, ...] = ()
    #: How the peer takes its length: ``steps`` (``--steps=epochs x steps``) or ``epochs``
    #: (``--epochs`` and ``--max-steps-per-epoch``, as the example itself).
    peer_length: str = "steps"
    #: More arguments, always passed.
    args: tuple[str, ...] = ()
    #: Alternating pairs of launches (hvdcore, peer) the scaling check splits the training
    #: into (``hvdcore_checks/interleave.py``; a chunk keeps at least 100 timed steps, so the
    #: Keras example's 80 steps are not split: each of its 2 pairs trains them all).
    chunks: int = 3

    def peer_length_args(self, epochs: int, steps_per_epoch: int) -> list[str]:
        """The peer's options for the same training length as hvdcore's run."""
        if self.peer_length == "epochs":
            return [f"--epochs={epochs}", f"--max-steps-per-epoch={steps_per_epoch}"]
        return [f"--steps={epochs * steps_per_epoch}"]


#: Framework (check parameter value) -> its example.
MNIST_EXAMPLES: dict[str, MnistExample] = {
    # SGD + momentum, 2 x 450 steps of 64 images (2 ranks' shards hold 468 batches): a timed
    # window of ~5 s at 1 thread per rank on a 2-core VM (10.5k img/s per rank), ~0.95 accuracy.
    "torch": MnistExample("pytorch_mnist.py", lr=0.05, max_steps_per_epoch=450, epochs=2,
                          peer_script="pytorch_mnist_ddp.py"),
    # Adadelta (the Keras example's optimizer): 80 steps of 64, 70 timed (~3-4 s at 1 thread
    # per rank), ~0.9 accuracy; TensorFlow's start dominates the run time, so the test set is
    # cut to 2000 images.
    # Its peer is the same example with raw mpi4py averaging the gradients (``--mode mpi``).
    "tensorflow": MnistExample("keras_mnist.py", lr=1.0, max_steps_per_epoch=80,
                               args=("--mode=hvd", "--test-samples=2000"),
                               peer_script="keras_mnist.py", peer_variable="mpi_ratio",
                               peer_args=("--mode=mpi", "--test-samples=2000"),
                               peer_length="epochs", chunks=2),
}


def locate_examples(script: str) -> list[str]:
    """Job-script lines that set ``$MNIST_EXAMPLES`` to the directory to run ``script`` from.

    The first of ``$EBROOTHVDCORE/<dir>`` (:data:`INSTALLED_EXAMPLE_DIRS`) that holds
    ``script`` -- the examples of the installed hvdcore being tested -- else the job's working
    directory (the stage directory, where ReFrame copied the repository's examples). The
    choice is printed as ``hvdcore-mnist-examples: <dir>``.
    """
    if not re.fullmatch(r"[\w.-]+", script):
        raise ValueError(f"example script name {script!r}: a file name in examples/ expected")
    dirs = " ".join(f'"$EBROOTHVDCORE/{d}"' for d in INSTALLED_EXAMPLE_DIRS)
    return [
        f'{EXAMPLES_VAR}="$PWD"',
        f'if [ -n "${{EBROOTHVDCORE:-}}" ]; then for d in {dirs}; do '
        f'if [ -f "$d/{script}" ]; then {EXAMPLES_VAR}="$d"; break; fi; done; fi',
        f'echo "hvdcore-mnist-examples: ${EXAMPLES_VAR}"',
    ]
