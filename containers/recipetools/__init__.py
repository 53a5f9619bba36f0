"""Tools for the Apptainer recipes in ``containers/``: build-machine and CI tools, not runtime.

They live next to the recipes they serve and are not part of the ``hvdcore`` package (a
``pip install hvdcore`` on a compute node installs none of them). Run them from the repository
root, where ``containers`` is importable (``python -m`` puts the current directory first on the
path; pytest gets the root from ``pythonpath`` in ``pyproject.toml``):

- :mod:`containers.recipetools.deffile`: parse Apptainer definition files, keeping line numbers.
- :mod:`containers.recipetools.defcheck`: ``python -m containers.recipetools.defcheck
  containers/*.def`` lints them.
- :mod:`containers.recipetools.rootfs`: ``python -m containers.recipetools.rootfs build ...``
  executes a Debian-based definition in a ``debootstrap`` rootfs under ``chroot`` (as root, for
  machines without Apptainer).

The self-check the images run in ``%test`` is a runtime entry and stays in hvdcore:
``python -m hvdcore.tools.allreduce_check``.
"""

__all__ = ["deffile", "defcheck", "rootfs"]
