"""The throughput model: parallel work spreads over workers, transfer and one target's timing do not."""

from studio.batch.scaling import TaskCosts, batch_seconds, dominant, throughput


def test_model_terms_scale_as_documented():
    c = TaskCosts(stage=1.0, overhead=0.0, transfer=0.0, scheduler=0.0)
    assert batch_seconds(c, 100, 10, 1) == 100 and batch_seconds(c, 100, 10, 4) == 25
    heavy_transfer = TaskCosts(stage=0.01, overhead=0.0, transfer=1.0, scheduler=0.0)
    assert throughput(heavy_transfer, 100, 100, 64) < throughput(heavy_transfer, 100, 100, 1) * 1.02
    assert dominant(heavy_transfer, 100, 100, 8) == "transfer"
    one_target = TaskCosts(stage=0.0, overhead=0.0, transfer=0.0, measurement=2.0, scheduler=0.0)
    assert batch_seconds(one_target, 10, 10, 1) == batch_seconds(one_target, 10, 10, 32) == 20
    floor = TaskCosts(stage=0.0, overhead=0.0, transfer=0.0, scheduler=0.001)
    assert batch_seconds(floor, 1000, 1, 1000) == 1.0
