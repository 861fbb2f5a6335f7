"""Seeded, randomised differential torture suite: every case is drawn from one integer and
compared with the single-process run of the same model."""
