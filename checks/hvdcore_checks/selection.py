"""Who maintains the hvdcore checks, and the tags a site selects them by.

ReFrame selects by tag with ``-t`` and by maintainer with ``--maintainer``::

    reframe -C <site config> -c checks/ -t ci -r                 # minutes: every merge request
    reframe -C <site config> -c checks/ -t nightly -r            # the nightly job
    reframe -C <site config> -c checks/ --maintainer hvdcore-team -r  # everything the team owns

* ``ci``: what fits a merge pipeline (capabilities, collectives: a few minutes);
* ``nightly``: the nightly job (the ``ci`` checks, MNIST scaling and elastic training);
* ``production``: before a new build of hvdcore is made the default (all of the above and the
  synthetic ResNet-50 benchmark).

    >>> sorted(TAGS["mnist"])
    ['nightly', 'production']
"""

from __future__ import annotations

__all__ = ["MAINTAINERS", "TAGS"]

#: The ``maintainers`` of every hvdcore check (a site may set its own: ``-S maintainers=...``).
MAINTAINERS = ["hvdcore-team"]

#: Kind of check -> its selection tags.
TAGS: dict[str, set[str]] = {
    "capabilities": {"ci", "nightly", "production"},
    "collectives": {"ci", "nightly", "production"},
    "mnist": {"nightly", "production"},
    "synthetic": {"production"},
}
