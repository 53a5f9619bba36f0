"""The programs the fault scenarios launch under ``mpirun``/``hvdcorerun``/``srun``.

Each is a module run with ``python -m faults.programs.<name>`` (the harness,
:func:`faults.jobs.job_env`, puts ``tests/`` on the ranks' ``PYTHONPATH``; the ReFrame fault
check runs ``python3 -m programs.train`` in its stage, a copy of ``tests/faults``), so the
programs share code with relative imports, and the judges import the same code:

- :mod:`.train`: NumPy-API training loop with injectable faults and atomic checkpoints;
  ``reference_state`` computes the same training in one process.
- :mod:`.train_torch`: the same with PyTorch and ``hvdcore.torch.DistributedOptimizer``.
- :mod:`.checkpoint`: atomic, self-verifying checkpoints (written by the training programs,
  verified by the judges).
- :mod:`.mismatch`, :mod:`.stall`: every mismatch kind in one job; one rank that never submits.
- :mod:`.fuzz_collectives`: hypothesis fuzzing of every core collective on 2 ranks in lockstep.
"""
