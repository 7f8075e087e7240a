"""Faults injected against real processes: the failure reproduced, then the fix asserted."""
