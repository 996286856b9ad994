"""``optim.contrib``: newer and experimental optimizers, as optax's ``optax.contrib``
(Muon, schedule-free, SAM, Prodigy, D-Adaptation, Mechanic, reduce-on-plateau, COCOB, DoG,
MADGRAD, MoMo, ADOPT, AdEMAMix, ACProp, Sophia, GaLore, DP-SGD).

    >>> import functrans.numpy as jnp
    >>> from functrans.optim import contrib
    >>> opt = contrib.schedule_free_adamw(learning_rate=0.01)
    >>> params = {"w": jnp.ones(2)}
    >>> updates, state = opt.update({"w": jnp.ones(2)}, opt.init(params), params)
    >>> eval_params = contrib.schedule_free_eval_params(state, params)
"""
from __future__ import annotations

from functrans.optim.contrib._acprop import acprop, scale_by_acprop
from functrans.optim.contrib._ademamix import (ScaleByAdemamixState,
                                               ScaleBySimplifiedAdEMAMixState, ademamix,
                                               scale_by_ademamix, scale_by_simplified_ademamix,
                                               simplified_ademamix)
from functrans.optim.contrib._adopt import adopt, scale_by_adopt
from functrans.optim.contrib._cocob import COCOBState, cocob, scale_by_cocob
from functrans.optim.contrib._complex_valued import (SplitRealAndImaginaryState,
                                                     split_real_and_imaginary)
from functrans.optim.contrib._distance_estimation import (DAdaptAdamWState, ProdigyState,
                                                          dadapt_adamw, prodigy)
from functrans.optim.contrib._dog import DoGState, DoWGState, dog, dowg
from functrans.optim.contrib._galore import (GaLoreDimensionNumbers, GaLoreState, galore,
                                             scale_by_galore)
from functrans.optim.contrib._madgrad import MadgradState, madgrad, scale_by_madgrad
from functrans.optim.contrib._mechanic import MechanicState, mechanize
from functrans.optim.contrib._momo import MomoAdamState, MomoState, momo, momo_adam
from functrans.optim.contrib._muon import MuonDimensionNumbers, MuonState, muon, scale_by_muon
from functrans.optim.contrib._privacy import (DifferentiallyPrivateAggregateState,
                                              differentially_private_aggregate, dpsgd)
from functrans.optim.contrib._reduce_on_plateau import ReduceLROnPlateauState, reduce_on_plateau
from functrans.optim.contrib._sam import NormalizeState, SAMState, normalize, sam
from functrans.optim.contrib._schedule_free import (ScheduleFreeState, schedule_free,
                                                    schedule_free_adamw,
                                                    schedule_free_eval_params,
                                                    schedule_free_sgd)
from functrans.optim.contrib._sophia import (HutchinsonState, SophiaState,
                                             hutchinson_estimator_diag_hessian, sophia)

__all__ = ["COCOBState", "DAdaptAdamWState", "DifferentiallyPrivateAggregateState", "DoGState",
           "DoWGState", "GaLoreDimensionNumbers", "GaLoreState", "HutchinsonState",
           "MadgradState", "MechanicState", "MomoAdamState", "MomoState",
           "MuonDimensionNumbers", "MuonState", "NormalizeState", "ProdigyState",
           "ReduceLROnPlateauState", "SAMState", "ScaleByAdemamixState",
           "ScaleBySimplifiedAdEMAMixState", "ScheduleFreeState", "SophiaState",
           "SplitRealAndImaginaryState", "acprop", "ademamix", "adopt", "cocob",
           "dadapt_adamw", "differentially_private_aggregate", "dog", "dowg", "dpsgd",
           "galore", "hutchinson_estimator_diag_hessian", "madgrad", "mechanize", "momo",
           "momo_adam", "muon", "normalize", "prodigy", "reduce_on_plateau", "sam",
           "scale_by_acprop", "scale_by_ademamix", "scale_by_adopt", "scale_by_cocob",
           "scale_by_galore", "scale_by_madgrad", "scale_by_muon",
           "scale_by_simplified_ademamix", "schedule_free", "schedule_free_adamw",
           "schedule_free_eval_params", "schedule_free_sgd", "simplified_ademamix", "sophia",
           "split_real_and_imaginary"]
