"""``optim.transforms``: the building-block transformations, as optax's
``optax.transforms`` (combining, masking, clipping, accumulation, conditions, monitoring).

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import transforms
    >>> opt = transforms.chain(transforms.clip(1.0), transforms.trace(0.9))
    >>> opt.update(jnp.array([3.0]), opt.init(jnp.zeros(1)))[0]
    Array([1.], dtype=float32)
"""
from __future__ import annotations

from functrans.optim._accumulation import (MultiSteps, MultiStepsState, ShouldSkipUpdateFunction,
                                           skip_large_updates, skip_not_finite)
from functrans.optim._adding import AddNoiseState, add_decayed_weights, add_noise
from functrans.optim._clipping import (adaptive_grad_clip, clip, clip_by_block_rms,
                                       clip_by_global_norm, per_example_global_norm_clip,
                                       per_example_layer_norm_clip, unitwise_clip,
                                       unitwise_norm)
from functrans.optim._combining import PartitionState, chain, named_chain, partition
from functrans.optim._conditionality import (ApplyIfFiniteState, ConditionFn,
                                             ConditionallyMaskState,
                                             ConditionallyTransformState, apply_if_finite,
                                             conditionally_mask, conditionally_transform)
from functrans.optim._constraining import (NonNegativeParamsState, ZeroNansState,
                                           keep_params_nonnegative, zero_nans)
from functrans.optim._freezing import freeze, selective_transform
from functrans.optim._layouts import flatten
from functrans.optim._masking import MaskedNode, MaskedState, masked
from functrans.optim._momentum import EmaState, TraceState, ema, trace
from functrans.optim._monitoring import (MonitorState, SnapshotState, measure_with_ema,
                                         monitor, snapshot)

__all__ = ["AddNoiseState", "ApplyIfFiniteState", "ConditionFn", "ConditionallyMaskState",
           "ConditionallyTransformState", "EmaState", "MaskedNode", "MaskedState",
           "MonitorState", "MultiSteps", "MultiStepsState", "NonNegativeParamsState",
           "PartitionState", "ShouldSkipUpdateFunction", "SnapshotState", "TraceState",
           "ZeroNansState", "adaptive_grad_clip", "add_decayed_weights", "add_noise",
           "apply_if_finite", "chain", "clip", "clip_by_block_rms", "clip_by_global_norm",
           "conditionally_mask", "conditionally_transform", "ema", "flatten", "freeze",
           "keep_params_nonnegative", "masked", "measure_with_ema", "monitor", "named_chain",
           "partition", "per_example_global_norm_clip", "per_example_layer_norm_clip",
           "selective_transform", "skip_large_updates", "skip_not_finite", "snapshot",
           "trace", "unitwise_clip", "unitwise_norm", "zero_nans"]
