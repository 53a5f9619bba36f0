"""Background engine: negotiation (coordinator), fusion and execution, timeline.

Modules: ``messages`` (what ranks and the coordinator exchange), ``coordinator`` (negotiation
logic), ``executor`` (fusion and backend calls), ``loop`` (the engine thread), ``handle``,
``timeline``, ``requests`` (what the API layer calls: submit a request, wait for it).
Importing this package does not import MPI; ``hvdcore.init()`` does.
"""
