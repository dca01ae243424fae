"""How the paper's schedule and loss (`vanilla_transformer.training.optimization`) relate to transformers' own:
`get_inverse_sqrt_schedule` and `LabelSmoother`. Each is kept for a reason shown here."""

import math

import pytest
import torch
from transformers import get_inverse_sqrt_schedule
from transformers.trainer_pt_utils import LabelSmoother

from vanilla_transformer.training.optimization import (
    label_smoothed_loss,
    paper_adam,
    paper_learning_rate,
    paper_schedule,
)

PEAK = 1.0


def multipliers(make_schedule, steps: int) -> list[float]:
    """The learning rate of each of the first `steps` updates, from a schedule on an optimizer at rate PEAK."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    schedule = make_schedule(optimizer)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return rates


@pytest.mark.parametrize("warmup", [1, 4, 7, 4000])
def test_paper_schedule_is_the_paper_formula_from_the_first_update(warmup):
    """Update n (from 0) uses the §5.3 rate of step n+1, relative to the peak, for steps 0..3·warmup."""
    steps = 3 * warmup + 1
    rates = multipliers(lambda optimizer: paper_schedule(optimizer, warmup), steps)
    peak = paper_learning_rate(warmup, d_model=512, warmup_steps=warmup)
    expected = [paper_learning_rate(n + 1, d_model=512, warmup_steps=warmup) / peak for n in range(steps)]
    assert rates == pytest.approx(expected, rel=1e-12)
    assert rates[0] > 0  # the first update learns


@pytest.mark.parametrize("warmup", [1, 4, 7])
def test_transformers_inverse_sqrt_schedule_is_one_step_behind(warmup):
    """`get_inverse_sqrt_schedule(timescale=warmup)` is the same curve counted from step 0: its rate for update n
    is ours for update n-1, so its first update has rate 0 (a wasted batch, which the paper's step-from-1 counting
    does not have) and the whole curve lags one update: lower than the paper's while warming up, higher after the
    peak. Reusing it would need a private
    transformers function (`_get_inverse_sqrt_schedule_lr_lambda`) shifted by one, so the project keeps its own."""
    steps = 3 * warmup + 1
    ours = multipliers(lambda optimizer: paper_schedule(optimizer, warmup), steps)
    library = multipliers(
        lambda optimizer: get_inverse_sqrt_schedule(optimizer, num_warmup_steps=warmup, timescale=warmup), steps + 1
    )
    assert library[0] == 0.0
    assert library[1:] == pytest.approx(ours, rel=1e-12)
    assert all(a < b for a, b in zip(library[:warmup], ours[:warmup], strict=True))
    assert all(a > b for a, b in zip(library[warmup:steps], ours[warmup:], strict=True))
    assert max(ours) == pytest.approx(1.0) and ours.index(max(ours)) == warmup - 1
    assert ours[-1] == pytest.approx(math.sqrt(warmup / (3 * warmup + 1)))


def batch(dtype: torch.dtype):
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(4, 7, 1000, generator=generator) * 4).to(dtype)
    labels = torch.randint(0, 1000, (4, 7), generator=generator)
    labels[0, 3:] = -100
    labels[2, 5:] = -100
    return {"logits": logits}, labels


@pytest.mark.parametrize("num_items_in_batch", [None, 40, torch.tensor(40)])
def test_label_smoothed_loss_is_transformers_label_smoother_in_float32(num_items_in_batch):
    """In float32 the project's loss is the Trainer's `LabelSmoother` (`label_smoothing_factor`), which also
    divides by `num_items_in_batch` when given (the accumulated batch's target tokens)."""
    outputs, labels = batch(torch.float32)
    ours = label_smoothed_loss(0.1)(outputs, labels, num_items_in_batch)
    library = LabelSmoother(epsilon=0.1)(outputs, labels, num_items_in_batch=num_items_in_batch)
    assert ours.item() == pytest.approx(library.item(), rel=1e-6)


def test_label_smoothed_loss_without_smoothing_is_plain_cross_entropy():
    outputs, labels = batch(torch.float32)
    expected = torch.nn.functional.cross_entropy(outputs["logits"].reshape(-1, 1000), labels.reshape(-1))
    assert label_smoothed_loss(0.0)(outputs, labels).item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_label_smoother_loses_precision_on_half_precision_logits(dtype):
    """Why the project keeps its own loss: `LabelSmoother` takes the log-softmax in the logits' dtype, the project's
    loss upcasts to float32 first, so under mixed precision only the project's loss matches the float32 one."""
    outputs, labels = batch(dtype)
    exact = label_smoothed_loss(0.1)({"logits": outputs["logits"].float()}, labels).item()
    ours = label_smoothed_loss(0.1)(outputs, labels).item()
    library = LabelSmoother(epsilon=0.1)(outputs, labels).item()
    assert ours == pytest.approx(exact, rel=1e-6)
    assert abs(library - exact) > 10 * abs(ours - exact) and abs(library - exact) / exact > 1e-4


def test_paper_adam_is_fused_and_steps_as_the_reference_adam():
    # the fused kernel must be the paper's Adam: same steps as torch's reference (for-loop) Adam with §5.3's settings
    torch.manual_seed(0)
    start = [torch.randn(64, 32), torch.randn(32)]
    fused_params = [torch.nn.Parameter(p.clone()) for p in start]
    plain_params = [torch.nn.Parameter(p.clone()) for p in start]
    fused = paper_adam(fused_params, 1e-3, torch.device("cpu"))
    plain = torch.optim.Adam(plain_params, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, foreach=False)
    assert fused.defaults["fused"] is True
    for _ in range(5):
        grads = [torch.randn_like(p) for p in start]
        for params, optimizer in ((fused_params, fused), (plain_params, plain)):
            for param, grad in zip(params, grads, strict=True):
                param.grad = grad.clone()
            optimizer.step()
    for a, b, s in zip(fused_params, plain_params, start, strict=True):
        assert not torch.equal(a, s)
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
