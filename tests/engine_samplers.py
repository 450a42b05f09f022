"""Samplers wrapping a live server's own, for tests that need a request to take its time or to fail.

`swapped(engine, wrapper)` puts `wrapper` in front of the engine's sampler for the
block and restores it after. The wrappers sample for real (through the sampler they
wrap) unless they fail on purpose, so answers stay the model's.
"""

from __future__ import annotations

import time
from contextlib import contextmanager


@contextmanager
def swapped(engine, wrap):
    """`wrap(real_sampler)` samples for `engine` inside the block."""
    real = engine.sampler
    engine.sampler = wrapper = wrap(real)
    try:
        yield wrapper
    finally:
        engine.sampler = real


class SlowSampler:
    """Samples for real, `delay` seconds per step: a request of a few tokens lasts that many times longer."""

    def __init__(self, real, delay: float) -> None:
        self.real, self.delay, self.new_state = real, delay, real.new_state

    def sample(self, logits, states, histories):
        time.sleep(self.delay)
        return self.real.sample(logits, states, histories)


class PoisonedSampler(SlowSampler):
    """Fails for the sequences of requests sent at one odd temperature once `allowed` of their samplings
    went through; samples every other request for real (after `delay`), counting those sampled after a
    failure (proof that they were in flight beside it)."""

    def __init__(self, real, poison: float, allowed: int = 0, delay: float = 0.0) -> None:
        super().__init__(real, delay)
        self.poison, self.allowed = poison, allowed
        self.failed, self.sampled_after_failure = False, 0

    def sample(self, logits, states, histories):
        if any(state.params.temperature == self.poison for state in states):
            self.allowed -= 1
            if self.allowed < 0:
                self.failed = True
                raise RuntimeError("a sampling that fails on purpose")
            return self.real.sample(logits, states, histories)
        self.sampled_after_failure += self.failed
        return super().sample(logits, states, histories)
