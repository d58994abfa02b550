"""The kernel: one run's task tree, its loop, its events and its records.

Nothing here imports a feature package; features attach through :mod:`._extension`.
"""
