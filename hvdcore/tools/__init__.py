"""Command-line tools that ship with hvdcore.

- :mod:`hvdcore.tools.deffile`: parse Apptainer definition files, keeping line numbers.
- :mod:`hvdcore.tools.defcheck`: ``python -m hvdcore.tools.defcheck containers/*.def`` lints them.
- :mod:`hvdcore.tools.rootfs`: executes a Debian-based definition in a ``debootstrap`` rootfs
  under ``chroot`` (for machines without Apptainer).
- :mod:`hvdcore.tools.allreduce_check`: the small allreduce self-test images run in ``%test``.
"""

__all__ = ["deffile", "defcheck", "rootfs", "allreduce_check"]
