"""Small command-line entries that run on compute nodes.

- :mod:`hvdcore.tools.allreduce_check`: the allreduce self-test container images run in
  ``%test`` (``hvdcorerun -np 2 python -m hvdcore.tools.allreduce_check``).

Build and test tools (the Apptainer recipe linter and the chroot recipe runner) are not part of
the runtime package: they live next to the recipes, in ``containers/recipetools/``.
"""

__all__ = ["allreduce_check"]
