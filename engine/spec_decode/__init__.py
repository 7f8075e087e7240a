"""Draft-free speculative decoding: proposers that need no draft model (n-gram lookup in the
request's own tokens, a suffix automaton over its tenant's recent outputs), the exact
verification of their proposals in one forward pass, and the policy that backs off under load
or low acceptance. docs/kernels.md ("Speculative decoding") explains the rules."""

from engine.spec_decode.speculator import SpecState, Speculator

__all__ = ["SpecState", "Speculator"]
