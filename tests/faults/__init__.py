"""Fault injection (issue 8): real jobs with real launchers, a fault injected, the ending judged.

hvdcore promises that a job never hangs and never loses a checkpoint: a dead rank, an
exception, a mismatch, a stall, a signal to the launcher, a node lost under Slurm all end the
job (or the failing call) promptly, with a message that names what happened, and nothing is
left running. This package checks those promises; see ``README.md`` here for every scenario,
its promises and recorded results.

- :mod:`faults.catalog`: every scenario once, named by the behaviour it checks.
- :mod:`faults.scenarios`, :mod:`faults.slurm`, :mod:`faults.reframe_check`: one function per
  scenario, which runs one trial and judges it (its docstring is its contract);
  :mod:`faults.judge`: what they judge alike.
- :mod:`faults.jobs`: a launched job with timestamped output, and the process table after it.
- :mod:`faults.programs`: what the jobs run (``python -m faults.programs.<name>``).
- :mod:`faults.fuzz_launcher`: hypothesis on hvdcorerun's command line, in-process.
- :mod:`faults.report`: the command that runs scenarios repeatedly and prints the table.

``tests/`` is the import root (``pythonpath`` in ``pyproject.toml`` for pytest;
``PYTHONPATH=tests python -m faults.report`` from the repository root for the report; the
ranks get it from :func:`faults.jobs.job_env`). The pytest entry points are
``tests/test_faults_*.py``.
"""
