"""An elastic torch job driven by a plan (env ELASTIC_PLAN, JSON), for tests/test_elastic_torch.py.

Each epoch walks an ElasticSampler over ``samples`` indices in batches of ``batch``; every batch is
one optimizer step of a one-layer model on an input that depends only on the global step (so the
weights after N steps equal a one-process reference whatever the job's size), and one commit.
Printed (one ``os.write`` per line): ``EPOCH e rank r size n host h`` when an epoch starts,
``SAMPLES e i,j`` on rank 0 before each commit (the samples of every rank's batch, which the commit
records as processed), ``RESET rank r size n``
from the reset callback, ``DONE rank r size n steps s epoch e w <weights>`` at the end.

Plan keys: ``epochs``; ``samples``; ``batch``; ``expect`` ({epoch: size or [hosts]}: at the
epoch's start the job commits every 0.1 s until it has that size or those hosts, at most 90 s;
once met, the committed ``waited`` skips it when a reset rolls back into that epoch);
``fail`` (tests/programs/elastic_faults.py); ``progress`` (rank 0 writes the epoch there for the
discovery script); ``sleep`` (seconds per step).
"""

import faulthandler
import json
import os
import sys
import time

import torch
from elastic_faults import fail_now, say  # this directory: the plan's failures

import hvdcore.torch as hvd

plan = json.loads(os.environ["ELASTIC_PLAN"])
host = os.environ.get("HOROVOD_HOSTNAME", "?")


# a worker that stands still this long prints every thread's stack (re-armed at each commit:
# a healthy job commits at least every few seconds): a hung test shows where it hung
STUCK_S = 75
faulthandler.dump_traceback_later(STUCK_S, exit=False)
hvd.init()
say(f"READY {os.getpid()} {os.getpid()}")  # the fault suite's leftover check reads the pids
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(list(range(plan["samples"])), shuffle=True, seed=3)
state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, batch=0, steps=0,
                               waited=-1)
state.register_reset_callbacks([lambda: say(f"RESET rank {hvd.rank()} size {hvd.size()}")])
B = plan["batch"]
_commit = state.commit


def commit():
    faulthandler.dump_traceback_later(STUCK_S, exit=False)
    _commit()


state.commit = commit


@hvd.elastic.run
def train(state):
    while state.epoch < plan["epochs"]:
        epoch = state.epoch
        if hvd.rank() == 0 and plan.get("progress"):
            with open(plan["progress"] + ".tmp", "w") as f:
                f.write(str(epoch))
            os.replace(plan["progress"] + ".tmp", plan["progress"])
        # committed state, so every rank (a new worker too, by sync) decides alike: a failure
        # after the wait rolls back into the epoch, and the failed host will not come back
        want = None if state.waited >= epoch else plan.get("expect", {}).get(str(epoch))
        deadline = time.monotonic() + 90
        while want is not None and (hvd.size() != want if isinstance(want, int)
                                    else sorted(hvd.allgather_object(host)) != sorted(want)):
            if time.monotonic() > deadline:
                raise SystemExit(f"epoch {epoch}: size {hvd.size()}, expected {want}")
            time.sleep(0.1)
            state.commit()
        if want is not None:
            state.waited = epoch
            state.commit()
        say(f"EPOCH {epoch} rank {hvd.rank()} size {hvd.size()} host {host}")
        indices = list(iter(state.sampler))
        # after a reset the sampler holds what is left of the epoch: a new pass from 0
        for b in range(len(indices) // B + (len(indices) % B > 0)):
            # the ranks' batch b together: the next B * size of the pass's order (dealt out)
            n = hvd.size()
            batch = sorted(state.sampler.remaining_indices[b * B * n:(b + 1) * B * n])
            state.sampler.record_batch(b, B)
            x = torch.full((2, 4), float(state.steps % 5 + 1))
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()
            state.steps += 1
            state.batch = b + 1
            fail_now(plan, host, epoch, b)
            if hvd.rank() == 0:
                say(f"SAMPLES {epoch} " + ",".join(str(i) for i in batch))
            if plan.get("sleep"):
                time.sleep(plan["sleep"])
            state.commit()
        state.epoch += 1
        state.batch = 0
        state.sampler.set_epoch(state.epoch)
        state.commit()
    return state.steps


steps = train(state)
w = ",".join(f"{v:.6f}" for v in torch.cat([p.detach().flatten() for p in model.parameters()]))
say(f"DONE rank {hvd.rank()} size {hvd.size()} steps {steps} epoch {state.epoch} w {w}")
hvd.shutdown()
sys.exit(0)
