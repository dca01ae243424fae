"""The paper's optimization (§5.3, §5.4), shared by `VanillaTransformerTrainer` and the plain accelerate loop: Adam,
the learning-rate schedule and the label-smoothed loss, exact under gradient accumulation."""

import math

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

# §5.3's Adam, for both training loops (the Trainer's arguments and `paper_adam`)
ADAM_BETAS = (0.9, 0.98)
ADAM_EPSILON = 1e-9


def peak_learning_rate(d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The §5.3 rate at step = warmup_steps, where the two branches meet: factor·d_model^-0.5·warmup^-0.5."""
    return factor * d_model**-0.5 * warmup_steps**-0.5


def paper_adam(parameters, learning_rate: float, device: torch.device) -> torch.optim.Adam:
    """§5.3: Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9, no weight decay; torch's fused kernel where it has one (CPU,
    CUDA), as the Trainer's `adamw_torch_fused`: a base model's step takes 26 ms instead of 120 on 2 CPU threads."""
    fused = torch.device(device).type in ("cpu", "cuda")
    return torch.optim.Adam(parameters, lr=learning_rate, betas=ADAM_BETAS, eps=ADAM_EPSILON, fused=fused)


def paper_learning_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """§5.3: lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5), `step` counting updates from 1."""
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def paper_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> LambdaLR:
    """The §5.3 schedule relative to the optimizer's learning rate, which must be the peak rate
    (`peak_learning_rate`). `LambdaLR` asks for the multiplier of update n+1 after n updates, so the first update
    uses step 1 as in the paper. transformers' `get_inverse_sqrt_schedule(timescale=warmup_steps)` is this schedule
    one update late: its first update gets learning rate 0, a batch wasted (`tests/training/test_schedule.py`)."""

    def multiplier(updates_done: int) -> float:
        step = updates_done + 1
        return min(step / warmup_steps, math.sqrt(warmup_steps / step))

    return LambdaLR(optimizer, multiplier)


def label_smoothed_loss(epsilon: float):
    """§5.4 label smoothing as a `Trainer` `compute_loss_func`: the summed smoothed cross-entropy divided by the
    target tokens of the whole accumulated batch, so that gradient accumulation gives the large batch's gradient.
    transformers' `LabelSmoother` gives the same value in float32, but takes the log-softmax in the logits' dtype:
    under fp16/bf16 autocast it drifts from the float32 loss, where this one does not
    (`tests/training/test_schedule.py`)."""

    def compute_loss(outputs, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None = None):
        logits = outputs["logits"]
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]),
            labels.reshape(-1).to(logits.device),
            ignore_index=-100,
            label_smoothing=epsilon,
            reduction="sum",
        )
        if num_items_in_batch is None:
            num_items_in_batch = (labels != -100).sum()
        return loss / torch.as_tensor(num_items_in_batch, device=loss.device)

    return compute_loss
