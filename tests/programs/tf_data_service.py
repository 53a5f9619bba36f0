"""A training job that reads its input from a compute job's tf.data service, for
tests/test_tf_data_service.py. ``python tf_data_service.py CONFIG MODE`` under mpirun:

- ``compute`` (dispatchers on the compute side): ``dataset.send_to_data_service(config, rank,
  size)``, every rank reading a whole epoch (``own``), then the same with
  ``reuse_dataset=True``, the ranks sharing one epoch (``shared``);
- ``training``: ``with tf_data_service(config, rank) as address`` (dispatchers on the training
  side, one per rank) and ``distribute`` applied here, then two steps of ``model.fit`` with
  hvdcore's DistributedOptimizer on batches the service made.

The dataset is ``range(24)`` squared by the service's workers. Printed: ``GOT own|shared rank
r <comma-separated values>`` per rank and epoch, in ``training`` mode also ``WEIGHTS rank r
<weights>``. Rank 0 then shuts the compute job down.
"""

import sys

import numpy as np
import tensorflow as tf

import hvdcore
import hvdcore.tensorflow.keras as hvd
from hvdcore.tensorflow.data.compute_service import TfDataServiceConfig, tf_data_service

config_file, mode = sys.argv[1], sys.argv[2]
hvd.init()
rank, size = hvd.rank(), hvd.size()
config = TfDataServiceConfig.read(config_file, wait_for_file_creation=True)
squares = tf.data.Dataset.range(24).map(lambda x: x * x)

if mode == "compute":
    for reuse in (False, True):
        got = squares.send_to_data_service(config, rank, size, reuse_dataset=reuse)
        values = sorted(int(v) for v in got)
        print(f"GOT {'shared' if reuse else 'own'} rank {rank} {','.join(map(str, values))}",
              flush=True)
else:
    with tf_data_service(config, rank) as address:
        served = squares.apply(tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=address))
        values = sorted(int(v) for v in served)
        import keras

        batches = tf.data.Dataset.range(8).map(
            lambda x: (tf.fill([4], tf.cast(x, tf.float32) / 8), tf.reshape(
                tf.cast(x % 2, tf.float32), [1]))).batch(4).repeat()
        train = batches.apply(tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=address))
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
                      loss="mse")
        model.fit(train, steps_per_epoch=2, epochs=1, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        weights = np.concatenate([np.ravel(w) for w in model.get_weights()])
        print(f"WEIGHTS rank {rank} {','.join(f'{w:.6f}' for w in weights)}", flush=True)
    print(f"GOT own rank {rank} {','.join(map(str, values))}", flush=True)
hvdcore.barrier()
if rank == 0:
    client = config.compute_client()
    client.shutdown()
    client.close()
hvd.shutdown()
