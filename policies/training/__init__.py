"""Training of learned policies (imports torch and SB3; never imported by ``policies``).

The public surface for your own stable-baselines3 script (see :mod:`.nets` for a full example):

* :class:`MaskableScorerActorCriticPolicy` (``sb3_contrib.MaskablePPO``),
  :class:`ScorerActorCriticPolicy` (``PPO``), :class:`ScorerDQNPolicy` (``DQN``): SB3 policies
  whose network is the per-candidate :class:`CandidateScorerNet`;
* :func:`export_model`: such a model to a policy file for :meth:`cachegym.LearnedPolicy.load`.

``scripts/train.py`` (:func:`.train.train`) runs the same classes from a Hydra config.
"""

from cachegym.policies.training.export import export_model
from cachegym.policies.training.nets import (
    CandidateScorerNet,
    MaskableScorerActorCriticPolicy,
    ScorerActorCriticPolicy,
    ScorerDQNPolicy,
)

__all__ = ["CandidateScorerNet", "MaskableScorerActorCriticPolicy", "ScorerActorCriticPolicy",
           "ScorerDQNPolicy", "export_model"]
