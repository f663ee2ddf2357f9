"""What a Ray cell or shard task asks for, and when GPU cells may shard (no Ray needed): a GPU cell holds its GPU
while it waits for its shards, so with no more GPUs than cells every GPU could be held by a waiting cell."""

from __future__ import annotations

from haldet.config import RunConfig
from haldet.flow.ray_executor import can_shard, resources


def test_gpu_tasks_ask_for_a_gpu_and_shard_only_with_spare_gpus() -> None:
    cpu = RunConfig(datasets=["halueval_qa", "halueval_dialogue"], models=["smollm2-135m"], device="cpu")
    gpu = cpu.model_copy(update={"device": "cuda"})
    assert resources(cpu) == {"num_cpus": 1, "num_gpus": 0}
    assert resources(gpu) == {"num_cpus": 1, "num_gpus": 1}
    assert can_shard(cpu, {"CPU": 2.0})  # CPU cells never hold a GPU
    assert not can_shard(gpu, {"CPU": 8.0, "GPU": 2.0})  # two cells could hold both GPUs: no shard could start
    assert can_shard(gpu, {"CPU": 8.0, "GPU": 3.0})
    assert not can_shard(gpu, {"CPU": 8.0})
