"""Budget-violation alerts: multi-window, multi-burn-rate rules per stage (DESIGN §8)."""
