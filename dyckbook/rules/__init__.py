"""The stack-free rules scored beside every model (counters, windows, n-grams, learned rules)
and the adversary that attacks the long-range sets with them; each says why it cannot
recognise the language. They read the data only: every run scores them, so they sit below
``experiment``."""
