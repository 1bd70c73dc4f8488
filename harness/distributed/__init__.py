"""Data-parallel training across processes.

- `placement`: can a cell run here (backend, GPUs, cores) and which cores or GPU each rank gets.
- `launch`: the parent side. Starts `torchrun` on `worker`, watches the ranks' heartbeats, kills the
  whole process tree on a crash or hang, and returns the merged result the ranks wrote.
- `slurm_span`: a cell too big for one Slurm node, as one job across nodes (what `launch` asks of
  Slurm); `slurm_task`: one node's task of that job (`python -m harness.distributed.slurm_task`).
- `worker`: the rank side. Pins the rank, joins the process group, runs a target function.
- `rank`: what a target function is given (rank, world, device, heartbeat, gather).
- `ddp_train`: the target for DDP training with DistributedSampler (T9, T10.2, D12.6).
"""
