"""The Keras 3 layer-graph reader of a model's local prefix (fast ISM), written with
``keras.ops`` only: ``graph``, with ``nodes``, ``local_ops`` and ``window_ops``; ``tail``
inlines nested models and runs the rest of the graph.
"""
