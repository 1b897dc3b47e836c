"""Fast heuristics and baselines: greedy, dynamic programming, local search, pymoo GA."""
