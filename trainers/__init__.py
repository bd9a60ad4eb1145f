"""Trainers: ``local`` (one-machine GRPO for Hugging Face causal LMs, on verl's ``core_algos``)."""
