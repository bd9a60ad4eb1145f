"""The self-evolving loop: evaluate on held-out tasks, analyse capability gaps, synthesize targeted tasks,
train, round after round (``arena evolve``). The only package that ties the pool, synthesis, evaluation and
training together."""
