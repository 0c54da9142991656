"""Measurements: the bench (every drafter on every bundled target), the cost model, quality and
stability reports."""
