"""A CPU-only RLinf training smoke, written as RLinf's examples are (a Hydra entry point, `Cluster`,
a `Worker` group placed by `cluster.component_placement`, `MetricLogger`, `global_step_N` checkpoints).

Three actor processes, one per node, train a linear model data-parallel: every step each rank computes the
gradient on its own shard, the gradients are averaged with a Gloo all-reduce over all ranks
(torch.distributed, initialised from the variables RLinf sets in each worker), and a token is passed round
the ranks with RLinf's point-to-point `send`/`recv`. The driver logs the loss to TensorBoard and every
`runner.save_interval` steps the ranks save the checkpoint with torch DCP, as RLinf's FSDP actor does, under
`<runner.output_dir>/<experiment_name>/checkpoints/global_step_N/actor/dcp_checkpoint/` (DCP's `.metadata`
last). With `runner.resume_dir` set (RLinf's key) it loads `<resume_dir>/actor` and goes on from step N, parsed
from the directory's name as RLinf's runners do. `runner.step_delay_s` (default 0) paces the steps, so a test
can stop a run midway. Nothing here knows about the platform that runs it.

    python train_cpu_smoke.py --config-path config --config-name cpu_smoke
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import hydra
import torch
import torch.distributed as dist
from omegaconf import DictConfig
from rlinf.scheduler import Cluster, Worker
from rlinf.utils.metric_logger import MetricLogger
from rlinf.utils.placement import HybridComponentPlacement
from torch.distributed import checkpoint as dcp

DCP_DIR = "dcp_checkpoint"
"""The directory RLinf's FSDP strategy saves into below `actor/` (`hybrid_engines/fsdp/strategy/base.py`)."""


class ActorWorker(Worker):
    """One data-parallel rank of the actor."""

    def __init__(self, cfg: DictConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def init_worker(self) -> dict[str, str | int]:
        dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from RLinf
        features = self.cfg.actor.features
        generator = torch.Generator().manual_seed(1000 + self._rank)
        self.true_weights = torch.randn(features, generator=torch.Generator().manual_seed(0))
        self.x = torch.randn(self.cfg.actor.rows_per_rank, features, generator=generator)
        self.y = self.x @ self.true_weights + 0.05 * torch.randn(
            self.cfg.actor.rows_per_rank, generator=generator
        )
        self.weights = torch.zeros(features)
        return {"rank": self._rank, "host": socket.gethostname(), "world": dist.get_world_size()}

    def train_step(self, step: int) -> dict[str, float]:
        error = self.x @ self.weights - self.y
        gradient = 2 * self.x.T @ error / len(self.y)
        dist.all_reduce(gradient)  # Gloo, across every rank on every node
        gradient /= dist.get_world_size()
        self.weights -= self.cfg.actor.learning_rate * gradient
        token = self._pass_token(step)
        return {"loss": float((error**2).mean()), "token": float(token.item())}

    def _pass_token(self, step: int) -> torch.Tensor:
        """Rank 0 sends a token round the ring (RLinf point-to-point); each rank adds its rank + 1."""
        world, name = dist.get_world_size(), self._group_name
        if world == 1:
            return torch.tensor([float(step)])
        if self._rank == 0:
            self.send(torch.tensor([float(step)]), name, 1)
            return self.recv(name, world - 1)
        token = self.recv(name, self._rank - 1) + (self._rank + 1)
        self.send(token, name, (self._rank + 1) % world)
        return token

    def save_checkpoint(self, step: int) -> str:
        """Every rank takes part (DCP plans the save collectively); DCP's coordinator writes `.metadata` last."""
        runner = self.cfg.runner
        folder = (
            Path(runner.output_dir) / runner.experiment_name / "checkpoints" / f"global_step_{step}" / "actor"
        )
        folder.mkdir(parents=True, exist_ok=True)
        dcp.save({"weights": self.weights, "step": torch.tensor(step)}, checkpoint_id=str(folder / DCP_DIR))
        return str(folder)

    def load_checkpoint(self, folder: str) -> int:
        state = {"weights": torch.zeros_like(self.weights), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=str(Path(folder) / DCP_DIR))
        self.weights = state["weights"]
        return int(state["step"])


@hydra.main(version_base="1.1")
def main(cfg: DictConfig) -> None:
    cluster = Cluster(cluster_cfg=cfg.cluster)
    placement = HybridComponentPlacement(cfg, cluster)
    actor = ActorWorker.create_group(cfg).launch(
        cluster, name="actor", placement_strategy=placement.get_strategy("actor")
    )
    ranks = actor.init_worker().wait()
    print(f"actor ranks: {ranks}", flush=True)
    hosts = {r["host"] for r in ranks}
    if len(hosts) != cfg.cluster.num_nodes:
        raise SystemExit(f"expected one actor per node, got hosts {sorted(hosts)}")

    start = 0
    resume_dir = cfg.runner.get("resume_dir", None)
    if resume_dir:  # as RLinf's runners resume: <resume_dir>/actor, the step from the directory's name
        start = int(str(resume_dir).split("global_step_")[-1])
        loaded = actor.load_checkpoint(os.path.join(resume_dir, "actor")).wait()
        if {int(s) for s in loaded} != {start}:
            raise SystemExit(f"{resume_dir} holds steps {sorted(loaded)}, not {start}")
        print(f"resumed from step {start} ({resume_dir})", flush=True)

    logger = MetricLogger(cfg)
    first_loss = last_loss = None
    world = len(ranks)
    delay = float(cfg.runner.get("step_delay_s", 0) or 0)
    for step in range(start + 1, cfg.runner.max_steps + 1):
        time.sleep(delay)
        results = actor.train_step(step).wait()
        loss = sum(r["loss"] for r in results) / len(results)
        expected_token = step + sum(range(2, world + 1)) if world > 1 else step
        if results[0]["token"] != expected_token:
            raise SystemExit(f"step {step}: token {results[0]['token']} != {expected_token}")
        logger.log({"train/loss": loss}, step)
        first_loss = loss if first_loss is None else first_loss
        last_loss = loss
        print(f"step {step} loss {loss:.4f}", flush=True)
        if step % cfg.runner.save_interval == 0:
            print(f"saved {actor.save_checkpoint(step).wait()[0]}", flush=True)
    logger.finish()
    if first_loss is None or last_loss is None:
        raise SystemExit(f"no step left to train after step {start}")
    if not last_loss < first_loss:
        raise SystemExit(f"the loss did not fall: {first_loss} -> {last_loss}")
    print(f"done: loss {first_loss:.4f} -> {last_loss:.4f} on {world} ranks, pid {os.getpid()}", flush=True)


if __name__ == "__main__":
    main()
