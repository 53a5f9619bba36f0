"""Horovod's ``horovod.tensorflow.data``: training input served by a tf.data service that a
separate compute job runs (see :mod:`hvdcore.tensorflow.data.compute_service` and
:mod:`hvdcore.tensorflow.data.compute_worker`)."""

from hvdcore.tensorflow.data.compute_service import (
    TfDataServiceConfig,
    compute_worker_fn,
    send_to_data_service,
    tf_data_service,
)

__all__ = ["TfDataServiceConfig", "compute_worker_fn", "send_to_data_service", "tf_data_service"]
