"""One run, from configuration to record: the recipe key (what determines a number), the
grid's cells, the training loop, evaluation with intervals, completion scores, checkpoints,
the data and run caches, the results files, and ``run`` (the one path)."""
