"""The engine: request -> announce -> negotiate -> fuse -> backend -> complete.

Modules, in the order one allreduce meets them: ``requests`` (the API layer hands requests in
and waits on them), ``handle`` (what the caller waits on), ``progress`` (the queue and who runs
cycles), ``loop`` (the :class:`Engine` and its cycle), ``control`` (announcements to the
coordinator and its lists back), ``coordinator`` (the negotiation logic on world rank 0, pure),
``cache`` and ``rounds`` (repeated allreduces skip negotiation), ``dispatch`` (each response to
its handler), ``executor`` (fusion buffers and the backend call), ``messages`` (what ranks
exchange), ``timeline``. Importing this package does not import MPI; ``hvdcore.init()`` does,
through :mod:`hvdcore.backends`.
"""
