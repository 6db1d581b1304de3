"""The attention engine: the only code that touches a model's internals (its structure, attention, and edits to heads, layers and LayerNorm dimensions).

Its modules, each importing only those above it (nothing is re-exported here: import a name from its module):

- :mod:`~bertology_core.engine.attention_function`: the attention function registered with transformers'
  attention interface, its active interceptor, and :func:`use_engine`; imports nothing from the engine;
- :mod:`~bertology_core.engine.structure`: what runs at each depth, which linear maps and LayerNorms are which (one
  traced pass), and the depth of the running layer;
- :mod:`~bertology_core.engine.first_token`: the last layer on the first position alone, for classifiers that read
  only it;
- :mod:`~bertology_core.engine.plan`: edit points, sites, the ``InterventionPlan``, and the ``StructureMask`` of a
  structured subnetwork (the plan that masks its removed heads and MLPs);
- :mod:`~bertology_core.engine.expansion`: several configurations in one pass (the batch repeated from the first
  layer where they differ: prefix reuse);
- :mod:`~bertology_core.engine.intervention`: ``intervene``, which makes a plan act on a model's forward passes.
"""
