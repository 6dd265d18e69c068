"""Plots and reports of the pipeline outputs (matplotlib, Agg canvas, PNG files written atomically)."""
