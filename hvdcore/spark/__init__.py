"""``hvdcore.spark``: Horovod's ``horovod.spark.run``, a function run as an hvdcore job whose
ranks are the tasks of a Spark job.

``import hvdcore.spark`` in place of ``import horovod.spark``::

    spark = SparkSession.builder.getOrCreate()
    ranks = hvdcore.spark.run(train, args=(42,), num_proc=4)   # train() calls hvd.init()

The ranks form their job on the Gloo controller, hosted by the driver, so torch must be
installed where they run; Spark itself is ``pip install pyspark`` (and a Java runtime).
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401 - fail here, with what to install, not inside run()
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("hvdcore.spark needs Spark: pip install pyspark (and a Java runtime)") \
        from exc

from hvdcore.spark.runner import run

__all__ = ["run"]
