"""Statistics and slowdown: what the numbers mean, computed the same way for every reader.

``window`` takes a statistic (median, q95, mean, ...) with its sample count and confidence
interval from a merged histogram, raised to the age of a stuck op; ``series`` computes many
steps of many series at once with numpy; ``baseline`` keeps the expected values with their
validity periods; ``slowdown`` divides one by the other. Reads the store; writes only
baselines.
"""
