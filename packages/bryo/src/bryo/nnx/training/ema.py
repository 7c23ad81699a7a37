"""`nnx.training.ema`: the exponential moving average of a model's Variables."""

from bryo_training import EMA as EMA
