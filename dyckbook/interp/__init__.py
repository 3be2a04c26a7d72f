"""Explaining trained models: attention measures, linear probes and ablations, activation
patching on minimal pairs, and hand-set constructions that a trained circuit is compared with."""
